{%- from tpldir ~ "/map.jinja" import mapdata as drv with context %}
{%- set branch = drv.branch | string %}

nvidia_driver-clean-services-service-dead:
  service.dead:
    - names: [nvidia-fabricmanager, nvidia-persistenced]
    - enable: False
    - onlyif: command -v systemctl && systemctl list-unit-files nvidia-persistenced.service

nvidia_driver-clean-packages-pkg-removed:
  pkg.removed:
    - pkgs:
      - {{ drv.open_package if drv.open else drv.proprietary_package }}
      - {{ "nvidia-fabricmanager" if branch | int >= 580 else "nvidia-fabricmanager-" ~ branch }}
{%- if grains.get("os_family") == "Debian" %}
      - {{ drv.pinning_package.format(branch=branch) }}

nvidia_driver-clean-repo-file-absent:
  file.absent:
    - names: [{{ drv.repo_file }}, {{ drv.keyring }}]
{%- else %}

nvidia_driver-clean-repo-pkgrepo-absent:
  pkgrepo.absent:
    - name: cuda-{{ drv.distros.get(grains.get("osfinger", ""), "unsupported") }}-{{ drv.arch }}
{%- endif %}
