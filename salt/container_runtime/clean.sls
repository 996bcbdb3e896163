{%- from tpldir ~ "/map.jinja" import mapdata as cr with context %}
{%- from "lib/packages.jinja" import packages with context %}
{%- set pkgs = {} %}{%- do packages(tpldir, pkgs) %}

container_runtime-clean-toolkit-pkg-removed:
  pkg.removed:
    - pkgs: {{ pkgs.toolkit.names | json }}
{%- if grains.get("os_family") == "Debian" %}

container_runtime-clean-repo-file-absent:
  file.absent:
    - names: [{{ cr.toolkit_repo_file }}, {{ cr.toolkit_keyring }}]
{%- else %}

container_runtime-clean-repo-pkgrepo-absent:
  pkgrepo.absent:
    - name: nvidia-container-toolkit
{%- endif %}
{#- the container engine stays: other workloads may use it -#}
