{%- from tpldir ~ "/map.jinja" import mapdata as drv with context %}
{%- from "lib/packages.jinja" import packages with context %}
{%- set branch = drv.branch | string %}
{%- set pkgs = {} %}
{%- do packages(tpldir, pkgs, branch=branch, fmt={"branch": branch, "kernel": grains.get("kernelrelease", "")}) %}
{%- set driver = pkgs.driver_open if drv.open else pkgs.driver_proprietary %}

nvidia_driver-clean-services-service-dead:
  service.dead:
    - names: [nvidia-fabricmanager, nvidia-persistenced]
    - enable: False
    - onlyif: command -v systemctl && systemctl list-unit-files nvidia-persistenced.service

nvidia_driver-clean-packages-pkg-removed:
  pkg.removed:
    - pkgs:
      - {{ driver.names[0] }}
{%- if pkgs.fabric_manager and pkgs.fabric_manager.names %}
      - {{ pkgs.fabric_manager.names[0] }}
{%- endif %}
{%- if grains.get("os_family") == "Debian" and pkgs.pinning.names %}
      - {{ pkgs.pinning.names[0] }}
{%- endif %}
{%- if grains.get("os_family") == "Debian" %}

nvidia_driver-clean-repo-file-absent:
  file.absent:
    - names: [{{ drv.repo_file }}, {{ drv.keyring }}, {{ drv.apt_preferences_file }}]
{%- else %}

nvidia_driver-clean-repo-pkgrepo-absent:
  pkgrepo.absent:
    - name: cuda-{{ drv.distros.get(grains.get("osfinger", ""), "unsupported") }}-{{ drv.arch }}
{%- endif %}
