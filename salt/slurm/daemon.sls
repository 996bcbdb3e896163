{#- The role's daemon (slurmctld or slurmd), restarted when the cluster's files or key change; a node
    the files do not list yet gets a note instead: slurmctld would refuse its slurmd. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as slurm, configured, listed, accounting, role with context %}
{%- if configured and slurm.start and not listed %}

slurm-daemon-not-listed-test-show_notification:
  test.show_notification:
    - text: "{{ grains['host'] }} is not in this cluster's slurm.conf yet: `gpufleet configure` adds it"
{%- elif configured and slurm.start %}
include:
  - .config
  - .spool
  - .munge_service
{%- if accounting %}
  - .accounting
{%- endif %}

slurm-daemon-service-running:
  service.running:
    - name: {{ slurm.services[role] }}
    - enable: True
    - require:
      - service: slurm-munge-service-running
      - file: slurm-spool-dirs-file-directory
{%- if accounting %}
      - cmd: slurm-dbd-cluster-cmd-run
{%- endif %}
    - watch:
{%- for name in slurm.files | sort %}
      - file: slurm-config-{{ name | replace(".", "_") }}-file-managed
{%- endfor %}
      - file: slurm-munge-key-file-managed
{%- endif %}
