{#- NVIDIA's CUDA repository (driver, CUDA, NCCL, DCGM, fabric manager come from it). -#}
{%- from tpldir ~ "/map.jinja" import mapdata as drv with context %}
{%- set distro = drv.distros.get(grains.get("osfinger", ""), "unsupported") %}
{%- set url = drv.repo_base ~ "/" ~ distro ~ "/" ~ drv.arch ~ "/" %}
{%- if grains.get("os_family") == "Debian" %}

nvidia_driver-repo-pkgrepo-managed:
  pkgrepo.managed:
    - humanname: NVIDIA CUDA ({{ distro }})
    - name: deb [signed-by={{ drv.keyring }}] {{ url }} /
    - file: {{ drv.repo_file }}
    - key_url: {{ url }}{{ drv.repo_key }}
    - signedby: {{ drv.keyring }}
    - aptkey: False
{%- else %}

nvidia_driver-repo-pkgrepo-managed:
  pkgrepo.managed:
    - name: cuda-{{ distro }}-{{ drv.arch }}
    - humanname: NVIDIA CUDA ({{ distro }})
    - baseurl: {{ url }}
    - gpgcheck: 1
    - gpgkey: {{ url }}{{ drv.repo_key }}
{%- endif %}
