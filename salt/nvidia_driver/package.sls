{%- from tpldir ~ "/map.jinja" import mapdata as drv with context %}
{%- set branch = drv.branch | string %}
{%- set kernel = grains.get("kernelrelease", "") %}

nvidia_driver-package-headers-pkg-installed:
  pkg.installed:
    - name: {{ drv.headers.format(kernel=kernel) }}

{%- if grains.get("os_family") == "Debian" %}
# the pinning package holds every NVIDIA package on the branch
nvidia_driver-package-pinning-pkg-installed:
  pkg.installed:
    - name: {{ drv.pinning_package.format(branch=branch) }}
    - require:
      - sls: {{ tpldir }}.repo
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
    - name: {{ drv.open_package if drv.open else drv.proprietary_package }}
    - require:
      - pkg: nvidia_driver-package-headers-pkg-installed
{%- if grains.get("os_family") == "Debian" %}
      - pkg: nvidia_driver-package-pinning-pkg-installed
{%- else %}
      - cmd: nvidia_driver-package-module-cmd-run
{%- endif %}

{%- if drv.fabric_manager %}
nvidia_driver-package-fabricmanager-pkg-installed:
  pkg.installed:
    - name: {{ "nvidia-fabricmanager" if branch | int >= 580 else "nvidia-fabricmanager-" ~ branch }}
    - require:
      - pkg: nvidia_driver-package-driver-pkg-installed
{%- endif %}
