{#- Slurm: munge with the cluster's key, then slurmctld (role controller) or slurmd with gpufleet's
    health check (role compute), each from the files gpufleet rendered for the whole cluster. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as slurm with context %}
{%- set role = slurm.role %}
{%- set configured = slurm.files and slurm.munge_key %}
{#- a node that came up after the files were rendered (a cloud pool's replacement) is not in them:
    it gets everything but a running slurmd, which slurmctld would refuse, until `gpufleet configure` #}
{%- set listed = role == "controller" or grains["host"] in slurm.nodes %}
{%- set accounting = role == "controller" and slurm.accounting %}
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
{%- if slurm.start and not listed %}

slurm-daemon-not-listed-test-show_notification:
  test.show_notification:
    - text: "{{ grains['host'] }} is not in this cluster's slurm.conf yet: `gpufleet configure` adds it"
{%- elif slurm.start %}

slurm-munge-service-running:
  service.running:
    - name: {{ slurm.services.munge }}
    - enable: True
    - watch:
      - file: slurm-munge-key-file-managed

{%- if accounting %}

# job accounting: MariaDB on the controller, a database and a user for slurmdbd (the password
# gpufleet derives from the cluster's key), slurmdbd, and the cluster registered with it
slurm-database-pkg-installed:
  pkg.installed:
    - pkgs: {{ slurm.packages.database | json }}

slurm-database-marker-file-managed:
  file.managed:
    - name: {{ slurm.database_marker }}
    - contents: "installed by gpufleet's slurm formula: `gpufleet down --clean` removes it (its data stays)"
    - makedirs: True
    - onchanges:
      - pkg: slurm-database-pkg-installed

slurm-database-service-running:
  service.running:
    - name: {{ slurm.services.database }}
    - enable: True
    - require:
      - pkg: slurm-database-pkg-installed

slurm-database-user-cmd-run:
  cmd.run:
    - name: mysql --batch   # as root, through the server's socket (unix_socket authentication)
    - stdin: |
        CREATE DATABASE IF NOT EXISTS {{ slurm.accounting.database }};
        CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '{{ slurm.accounting.password }}';
        ALTER USER 'slurm'@'localhost' IDENTIFIED BY '{{ slurm.accounting.password }}';
        GRANT ALL ON {{ slurm.accounting.database }}.* TO 'slurm'@'localhost';
    - unless: mysql --batch -N -e "SHOW GRANTS FOR 'slurm'@'localhost'" | grep -q '{{ slurm.accounting.database }}'
    - output_loglevel: quiet   # the statements carry the password
    - hide_output: True        # nor does its output go into Salt's return (a failed state's, into the node's status)
    - require:
      - service: slurm-database-service-running

slurm-dbd-config-file-managed:
  file.managed:
    - name: {{ slurm.conf_dir }}/slurmdbd.conf
    - contents_pillar: slurm:accounting:conf
    - user: slurm
    - group: slurm
    - mode: "0600"   # slurmdbd refuses a slurmdbd.conf others can read
    - show_changes: False
    - require:
      - file: slurm-config-dir-file-directory
      - pkg: slurm-packages-pkg-installed

slurm-dbd-service-running:
  service.running:
    - name: {{ slurm.services.accounting }}
    - enable: True
    - require:
      - cmd: slurm-database-user-cmd-run
      - service: slurm-munge-service-running
      - file: slurm-spool-dirs-file-directory
    - watch:
      - file: slurm-dbd-config-file-managed
      - file: slurm-munge-key-file-managed

slurm-dbd-cluster-cmd-run:
  cmd.run:
    - name: sacctmgr --immediate add cluster {{ slurm.accounting.cluster }}
    - unless: sacctmgr --noheader --parsable2 list cluster {{ slurm.accounting.cluster }} format=cluster | grep -qx {{ slurm.accounting.cluster }}
    - retry:   # slurmdbd takes a moment to listen after it starts
        attempts: 15
        interval: 2
    - require:
      - service: slurm-dbd-service-running
      - file: slurm-config-slurm_conf-file-managed
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
{%- endif %}
