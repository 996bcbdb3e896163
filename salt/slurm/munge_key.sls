{#- The cluster's munge key on every node (a new one from the package is replaced), readable by munge alone. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as slurm, configured with context %}
{%- if configured %}
include:
  - .package

slurm-munge-key-file-managed:
  file.managed:
    - name: {{ slurm.munge_key_file }}
    - contents_pillar: slurm:munge_key
    - user: munge
    - group: munge
    - mode: "0400"
    - show_changes: False
    - require:
      - pkg: slurm-packages-pkg-installed
{%- endif %}
