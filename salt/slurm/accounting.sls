{#- Job accounting (a controller with `slurm: {accounting: true}`): MariaDB, a database and a user for
    slurmdbd (the password gpufleet derives from the cluster's key), slurmdbd, and the cluster
    registered with it. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as slurm, configured, listed, accounting with context %}
{%- if configured and slurm.start and listed and accounting %}
include:
  - .package
  - .config
  - .spool
  - .munge_service

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
