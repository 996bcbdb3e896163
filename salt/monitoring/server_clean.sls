{#- Undo monitoring.server where it ran (its marker says so): the daemons stopped, the packages purged
    (their configuration files with them: the cluster's targets must not outlive it), gpufleet's rules
    folder, /etc/prometheus once empty, and the marker removed. The series Prometheus kept are data: the package's purge decides. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as mon with context %}
{%- set srv = mon.server %}
{%- set pkgs = mon.get("server_packages") or {} %}
{%- if pkgs.get("prometheus") %}
include:
  - monitoring.collector_clean
{%- set daemons = [mon.server_services.prometheus, mon.server_services.alertmanager] %}

monitoring-server_clean-services-service-dead:
  service.dead:
    - names: {{ daemons | json }}
    - enable: False
    - onlyif:
      - test -f {{ srv.marker }}
      - test -d /run/systemd/system

# a host without a running systemd (a container, the test rack): the packages' init scripts, which
# their removal scripts do not run there
monitoring-server_clean-initscripts-cmd-run:
  cmd.run:
    - name: for s in {{ daemons | join(" ") }}; do [ ! -x "/etc/init.d/$s" ] || "/etc/init.d/$s" stop; done
    - onlyif: test -f {{ srv.marker }}
    - unless: test -d /run/systemd/system

monitoring-server_clean-packages-pkg-purged:
  pkg.purged:
    - pkgs: {{ ([pkgs.prometheus, pkgs.alertmanager] + ([pkgs.promtool] if pkgs.get("promtool") else [])) | json }}
    - onlyif: test -f {{ srv.marker }}
    - require:
      - service: monitoring-server_clean-services-service-dead
      - cmd: monitoring-server_clean-initscripts-cmd-run

{#- the rules folder is monitoring.server's own (no package ships it): while it is there, dpkg's purge above
    cannot remove /etc/prometheus either, so that goes after it where nothing else is left in it #}
monitoring-server_clean-files-file-absent:
  file.absent:
    {#- gpufleet-targets: the cloud nodes root listed for Prometheus (clouds/node_targets.py DIR) #}
    - names: {{ [srv.conf_dir ~ "/rules", srv.conf_dir ~ "/gpufleet-targets", srv.marker] | json }}
    - require:
      - pkg: monitoring-server_clean-packages-pkg-purged

monitoring-server_clean-conf-dir-cmd-run:
  cmd.run:
    - name: rmdir {{ srv.conf_dir }}
    - onlyif: test -d {{ srv.conf_dir }} && test -z "$(ls -A {{ srv.conf_dir }})"
    - require:
      - file: monitoring-server_clean-files-file-absent

{#- Grafana, where monitoring.grafana installed it (its marker): stopped, purged, and what it and gpufleet left: its
    apt source and key, /etc/grafana (grafana.ini, the provisioning), /var/lib/grafana (its database, the dashboards)
    and the secrets #}
{%- set g = mon.grafana %}

monitoring-server_clean-grafana-service-dead:
  service.dead:
    - name: {{ g.service }}
    - enable: False
    - onlyif:
      - test -f {{ g.marker }}
      - test -d /run/systemd/system

monitoring-server_clean-grafana-initscript-cmd-run:
  cmd.run:
    - name: /etc/init.d/{{ g.service }} stop
    - onlyif: test -f {{ g.marker }} && test -x /etc/init.d/{{ g.service }}
    - unless: test -d /run/systemd/system

monitoring-server_clean-grafana-pkg-purged:
  pkg.purged:
    - pkgs: [{{ g.package }}]
    - onlyif: test -f {{ g.marker }}
    - require:
      - service: monitoring-server_clean-grafana-service-dead
      - cmd: monitoring-server_clean-grafana-initscript-cmd-run

monitoring-server_clean-grafana-files-file-absent:
  file.absent:
    - names: {{ [g.repo_file, g.keyring, g.ini.rsplit("/", 1)[0], "/var/lib/grafana", g.secrets_dir, g.marker] | json }}
    - onlyif: test -f {{ g.marker }}
    - require:
      - pkg: monitoring-server_clean-grafana-pkg-purged
{%- endif %}
