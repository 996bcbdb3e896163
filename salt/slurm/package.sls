{#- Slurm's and munge's packages for the node's role (and slurmdbd's on a controller with accounting). -#}
{%- from tpldir ~ "/map.jinja" import mapdata as slurm, role, accounting with context %}
{%- if grains.get("os_family") == "RedHat" %}
include:
  - nvidia_driver.repo   # CRB, then EPEL, which has Slurm and munge on EL 9
{%- endif %}

slurm-packages-pkg-installed:
  pkg.installed:
    - pkgs: {{ (slurm.packages.munge + slurm.packages[role] + (slurm.packages.accounting if accounting else []))
               | json }}
{%- if grains.get("os_family") == "Debian" %}
    - install_recommends: False  # slurm-client recommends every plugin Debian builds
{%- endif %}
{%- if grains.get("os_family") == "RedHat" %}
    - require:
      - sls: nvidia_driver.repo
{%- endif %}
