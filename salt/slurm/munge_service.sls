{#- munged, restarted when the cluster's key changes (on a node the cluster's files list). -#}
{%- from tpldir ~ "/map.jinja" import mapdata as slurm, configured, listed with context %}
{%- if configured and slurm.start and listed %}
include:
  - .munge_key

slurm-munge-service-running:
  service.running:
    - name: {{ slurm.services.munge }}
    - enable: True
    - watch:
      - file: slurm-munge-key-file-managed
{%- endif %}
