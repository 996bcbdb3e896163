{#- The daemons' spool directories, owned by the slurm user the packages create. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as slurm, configured with context %}
{%- if configured %}
include:
  - .package

slurm-spool-dirs-file-directory:
  file.directory:
    - names: {{ slurm.spool_dirs | json }}
    - user: slurm
    - group: slurm
    - mode: "0755"
    - require:
      - pkg: slurm-packages-pkg-installed
{%- endif %}
