{#- Slurm: munge with the cluster's key, then slurmctld (role controller) or slurmd with gpufleet's
    health check (role compute), each from the files gpufleet rendered for the whole cluster. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as slurm with context %}
{%- set role = slurm.role %}
{%- set configured = slurm.files and slurm.munge_key %}
{%- if grains.get("os_family") == "RedHat" %}
include:
  - nvidia_driver.repo   # CRB, then EPEL, which has Slurm and munge on EL 9
{%- endif %}

slurm-packages-pkg-installed:
  pkg.installed:
    - pkgs: {{ (slurm.packages.munge + slurm.packages[role]) | json }}
{%- if grains.get("os_family") == "Debian" %}
    - install_recommends: False  # slurm-client recommends every plugin Debian builds
{%- endif %}
{%- if grains.get("os_family") == "RedHat" %}
    - require:
      - sls: nvidia_driver.repo
{%- endif %}
{%- if configured %}

# the cluster's key on every node (a new one from the package is replaced), readable by munge alone
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

slurm-config-dir-file-directory:
  file.directory:
    - name: {{ slurm.conf_dir }}
    - mode: "0755"

{%- for name in slurm.files | sort %}

slurm-config-{{ name | replace(".", "_") }}-file-managed:
  file.managed:
    - name: {{ slurm.conf_dir }}/{{ name }}
    - contents_pillar: "slurm:files:{{ name }}"
    - mode: "0644"
    - require:
      - file: slurm-config-dir-file-directory
{%- endfor %}

slurm-spool-dirs-file-directory:
  file.directory:
    - names: {{ slurm.spool_dirs | json }}
    - user: slurm
    - group: slurm
    - mode: "0755"
    - require:
      - pkg: slurm-packages-pkg-installed
{%- if role == "compute" %}

# gpufleet's node checks as slurmd's HealthCheckProgram: the checks' bundle, this node's
# expectations, and the program that drains the node when they fail
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
{%- if slurm.start %}

slurm-munge-service-running:
  service.running:
    - name: {{ slurm.services.munge }}
    - enable: True
    - watch:
      - file: slurm-munge-key-file-managed

slurm-daemon-service-running:
  service.running:
    - name: {{ slurm.services[role] }}
    - enable: True
    - require:
      - service: slurm-munge-service-running
      - file: slurm-spool-dirs-file-directory
    - watch:
{%- for name in slurm.files | sort %}
      - file: slurm-config-{{ name | replace(".", "_") }}-file-managed
{%- endfor %}
      - file: slurm-munge-key-file-managed
{%- endif %}
{%- endif %}
