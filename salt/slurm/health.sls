{#- gpufleet's node checks as slurmd's HealthCheckProgram (role compute): the checks' bundle, this
    node's expectations, and the program that drains the node when they fail (and, where no node watch does,
    writes its health for Prometheus: what the node is comes from the gpufleet pillar). -#}
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
                   "bundle": slurm.health_dir ~ "/verify.pyz",
                   "node": {"provider": salt["pillar.get"]("gpufleet:provider"),
                            "gpu_model": salt["pillar.get"]("gpufleet:gpu:model"),
                            "gpus": salt["pillar.get"]("gpufleet:gpu:count")}} | json }}
    - require:
      - file: slurm-health-dir-file-directory

slurm-health-program-file-managed:
  file.managed:
    - name: {{ slurm.health_program }}
    - source: salt://{{ tpldir }}/files/gpufleet-slurm-health
    - mode: "0755"
{%- endif %}
