{#- Undo the slurm formula, its parts in reverse: its daemons stopped (daemon, munge_service), the
    database accounting installed (accounting), its packages purged (package: their init links and
    conffiles with them: the cluster's configuration must not outlive it), then its files (health,
    spool, config, munge_key) removed. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as slurm with context %}
{#- The database server goes only where the formula installed it (its marker says so), and its
    data directory stays: job history is data (MariaDB's purge keeps its databases unless told). #}
{%- set daemons = [slurm.services.controller, slurm.services.accounting, slurm.services.compute,
                   slurm.services.munge] %}
{%- set marker = slurm.database_marker %}

slurm-clean-services-service-dead:
  service.dead:
    - names: {{ daemons | json }}
    - enable: False
    - onlyif: test -d /run/systemd/system

# a host without a running systemd (a container, the test rack): the packages' init scripts, which
# their removal scripts do not run there (invoke-rc.d finds no runlevel)
slurm-clean-initscripts-cmd-run:
  cmd.run:
    - name: for s in {{ daemons | join(" ") }}; do [ ! -x "/etc/init.d/$s" ] || "/etc/init.d/$s" stop; done
    - unless: test -d /run/systemd/system

slurm-clean-database-service-dead:
  service.dead:
    - name: {{ slurm.services.database }}
    - enable: False
    - onlyif:
      - test -f {{ marker }}
      - test -d /run/systemd/system

slurm-clean-database-initscript-cmd-run:
  cmd.run:
    - name: /etc/init.d/{{ slurm.services.database }} stop
    - onlyif:
      - test -f {{ marker }}
      - test -x /etc/init.d/{{ slurm.services.database }}
    - unless: test -d /run/systemd/system

slurm-clean-database-pkg-purged:
  pkg.purged:
    - pkgs: {{ slurm.packages.database | json }}
    - onlyif: test -f {{ marker }}
    - require:
      - service: slurm-clean-database-service-dead
      - cmd: slurm-clean-database-initscript-cmd-run

slurm-clean-packages-pkg-purged:
  pkg.purged:
    - pkgs: {{ (slurm.packages.controller + slurm.packages.accounting + slurm.packages.compute + slurm.packages.munge
                + slurm.packages.libraries) | unique | list | json }}
    - require:
      - service: slurm-clean-services-service-dead
      - cmd: slurm-clean-initscripts-cmd-run

slurm-clean-files-file-absent:
  file.absent:
    - names: {{ ([slurm.conf_dir ~ "/slurm.conf", slurm.conf_dir ~ "/gres.conf", slurm.conf_dir ~ "/cgroup.conf",
                  slurm.conf_dir ~ "/topology.conf", slurm.conf_dir ~ "/slurmdbd.conf", slurm.munge_key_file,
                  slurm.health_program, slurm.prolog_program, slurm.slots_program, slurm.health_dir, slurm.health_run_dir, marker] + slurm.spool_dirs) | json }}
    - require:
      - pkg: slurm-clean-packages-pkg-purged
      - pkg: slurm-clean-database-pkg-purged
