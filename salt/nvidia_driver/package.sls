{%- from tpldir ~ "/map.jinja" import mapdata as drv with context %}
{%- from "lib/packages.jinja" import packages with context %}
{%- set branch = drv.branch | string %}
{%- set pkgs = {} %}
{%- do packages(tpldir, pkgs, branch=branch, fmt={"branch": branch, "kernel": grains.get("kernelrelease", "")}) %}
{%- set driver = pkgs.driver_open if drv.open else pkgs.driver_proprietary %}
{%- set same_branch = "modinfo -F version nvidia 2>/dev/null | grep -q '^" ~ branch ~ "\\.'" %}

# A driver the image already has (Azure's HPC images; a runfile install) is kept when it is of
# the stack's branch and refused when it is not: a second driver installed over it breaks both.
nvidia_driver-package-preinstalled-cmd-run:
  cmd.run:
    - name: >-
        echo "this node already has NVIDIA driver $(modinfo -F version nvidia) and the stack asks for branch
        {{ branch }}: set software.driver to its branch, or boot an image without a driver" >&2; exit 1
    - onlyif: modinfo -F version nvidia >/dev/null 2>&1 && ! {{ same_branch }}

nvidia_driver-package-headers-pkg-installed:
  pkg.installed:
    - name: {{ pkgs.headers.names[0] }}
    - refresh: True
    - require:
      - sls: {{ tpldir }}.repo
{%- if grains.get("os_family") == "Debian" %}
{%- if pkgs.pinning.names %}

# the pinning package holds every NVIDIA package on the branch
nvidia_driver-package-pinning-pkg-installed:
  pkg.installed:
    - name: {{ pkgs.pinning.names[0] }}
    - require:
      - sls: {{ tpldir }}.repo
{%- else %}

# before R580 NVIDIA publishes no pinning package: apt preferences hold the branch the same way
# (a package without a {{ branch }}.* version, like the container toolkit, is not affected)
nvidia_driver-package-pinning-file-managed:
  file.managed:
    - name: {{ drv.apt_preferences_file }}
    - mode: "0644"
    - contents: |
        # managed by gpufleet (nvidia_driver): hold NVIDIA's driver packages on branch {{ branch }}
        Package: nvidia-* libnvidia-* cuda-drivers* xserver-xorg-video-nvidia* libxnvctrl*
        Pin: version {{ branch }}.*
        Pin-Priority: 1000
{%- endif %}
{%- else %}

nvidia_driver-package-module-cmd-run:
  cmd.run:
    - name: dnf -y module reset nvidia-driver && dnf -y module enable nvidia-driver:{{ branch }}-{{ "open" if drv.open else "dkms" }}
    - unless: dnf -q module list --enabled nvidia-driver 2>/dev/null | grep -qE '^nvidia-driver +{{ branch }}-{{ "open" if drv.open else "dkms" }} '
    - require:
      - sls: {{ tpldir }}.repo
{%- endif %}

nvidia_driver-package-driver-pkg-installed:
  pkg.installed:
    - name: {{ driver.names[0] }}
    - unless: {{ same_branch }}
    - require:
      - cmd: nvidia_driver-package-preinstalled-cmd-run
      - pkg: nvidia_driver-package-headers-pkg-installed
{%- if grains.get("os_family") == "Debian" %}
      - {{ "pkg: nvidia_driver-package-pinning-pkg-installed" if pkgs.pinning.names else "file: nvidia_driver-package-pinning-file-managed" }}
{%- else %}
      - cmd: nvidia_driver-package-module-cmd-run
{%- endif %}
{%- if drv.fabric_manager %}
{%- if pkgs.fabric_manager and pkgs.fabric_manager.confirmed %}

# NVSwitch GPUs do not initialise without it; an image that brought its driver brings its own
nvidia_driver-package-fabricmanager-pkg-installed:
  pkg.installed:
    - name: {{ pkgs.fabric_manager.names[0] }}
    - unless: systemctl cat nvidia-fabricmanager.service >/dev/null 2>&1
    - require:
      - pkg: nvidia_driver-package-driver-pkg-installed
{%- else %}

nvidia_driver-package-fabricmanager-test-fail_without_changes:
  test.fail_without_changes:
    - name: "no fabric manager package is known for driver {{ branch }} on {{ grains.get('osfinger') }} (salt/lib/packages.yaml{{ ': ' ~ pkgs.fabric_manager.why if pkgs.fabric_manager else '' }})"
{%- endif %}
{%- endif %}
