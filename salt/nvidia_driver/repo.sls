{#- NVIDIA's CUDA repository (driver, CUDA, NCCL, DCGM, fabric manager come from it), and on EL 9
    the CRB and EPEL repositories DKMS needs, before any driver package. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as drv with context %}
{%- from "lib/packages.jinja" import packages with context %}
{%- set distro = drv.distros.get(grains.get("osfinger", ""), "unsupported") %}
{%- set url = drv.repo_base ~ "/" ~ distro ~ "/" ~ drv.arch ~ "/" %}
{%- if grains.get("os_family") == "Debian" %}

# An image that already lists NVIDIA's repository (Azure's HPC images, the cuda-keyring package)
# keeps its entry: a second one with another Signed-By makes apt refuse every source
# ("Conflicting values set for option Signed-By"), so apt-get update would fail.
nvidia_driver-repo-pkgrepo-managed:
  pkgrepo.managed:
    - humanname: NVIDIA CUDA ({{ distro }})
    - name: deb [signed-by={{ drv.keyring }}] {{ url }} /
    - file: {{ drv.repo_file }}
    - key_url: {{ url }}{{ drv.repo_key }}
    - signedby: {{ drv.keyring }}
    - aptkey: False
    - unless: grep -rlsF --exclude={{ drv.repo_file.split("/")[-1] }} "{{ url.split("://")[-1].rstrip("/") }}" /etc/apt/sources.list /etc/apt/sources.list.d/
{%- else %}
{%- set epel = {} %}{%- do packages("epel", epel) %}

# the id NVIDIA's own cuda-rhel9.repo uses, so an image that has it keeps one entry
nvidia_driver-repo-pkgrepo-managed:
  pkgrepo.managed:
    - name: cuda-{{ distro }}-{{ drv.arch }}
    - humanname: cuda-{{ distro }}-{{ drv.arch }}
    - baseurl: {{ url.rstrip("/") }}
    - enabled: 1
    - gpgcheck: 1
    - gpgkey: {{ url }}{{ drv.repo_key }}

nvidia_driver-repo-crb-cmd-run:
  cmd.run:
    - name: {{ drv.crb_enable }}
    - unless: dnf -q repolist --enabled | grep -qiE '^(crb|codeready-builder)'
{%- if epel.release %}

nvidia_driver-repo-epel-pkg-installed:
  pkg.installed:
{%- if epel.release.names[0].startswith("https://") %}
    - sources:
      - epel-release: {{ epel.release.names[0] }}
{%- else %}
    - name: {{ epel.release.names[0] }}
{%- endif %}
    - require:
      - cmd: nvidia_driver-repo-crb-cmd-run
{%- else %}

nvidia_driver-repo-epel-test-fail_without_changes:
  test.fail_without_changes:
    - name: "no EPEL release package is known for {{ grains.get('osfinger') }} (salt/lib/packages.yaml): DKMS needs EPEL"
{%- endif %}
{%- endif %}
