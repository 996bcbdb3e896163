{#- gpufleet's node checks as slurmd's HealthCheckProgram (role compute): the checks' bundle, this
    node's expectations, and the program that drains the node when they fail. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as slurm, configured, role with context %}
{%- if configured and role == "compute" %}

slurm-health-dir-file-directory:
  file.directory:
    - name: {{ slurm.health_dir }}
    - mode: "0755"

slurm-health-bundle-file-decode:
  file.decode:
    - name: {{ slurm.health_dir }}/verify.pyz
    - encoding_type: base64
    - encoded_data: {{ slurm.health.bundle | json }}
    - require:
      - file: slurm-health-dir-file-directory

slurm-health-expect-file-serialize:
  file.serialize:
    - name: {{ slurm.health_dir }}/health.json
    - serializer: json
    - dataset: {{ {"expect": slurm.health.expect, "gpus_seen": slurm.health.gpus_seen,
                   "bundle": slurm.health_dir ~ "/verify.pyz"} | json }}
    - require:
      - file: slurm-health-dir-file-directory

slurm-health-program-file-managed:
  file.managed:
    - name: {{ slurm.health_program }}
    - source: salt://{{ tpldir }}/files/gpufleet-slurm-health
    - mode: "0755"
{%- endif %}
