{#- Undoes monitoring.collector (monitoring.server's clean includes it): its timer stopped, its files and its
    metrics file gone. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as mon with context %}
{%- from tpldir ~ "/collector.jinja" import collector as c with context %}

monitoring-collector-clean-timer-service-dead:
  service.dead:
    - name: {{ c.unit }}.timer
    - enable: False
    - onlyif: command -v systemctl && test -d /run/systemd/system

monitoring-collector-clean-files-file-absent:
  file.absent:
    - names:
      - {{ c.program }}
      - {{ c.settings_file }}
      - /etc/systemd/system/{{ c.unit }}.service
      - /etc/systemd/system/{{ c.unit }}.timer
      - {{ mon.textfile_dir }}/gpufleet_cluster.prom
    - require:
      - service: monitoring-collector-clean-timer-service-dead

{# a run killed between writing and renaming leaves its temporary file (gpufleet_cluster.prom.<pid>; node_exporter
    reads only *.prom, so it is harmless until now). Salt's file.tidied: `matches` are regular expressions on the
    file's name; age 0 takes any (salt/states/file.py, Salt 3008, read 2026-11-27) #}
monitoring-collector-clean-leftovers-file-tidied:
  file.tidied:
    - name: {{ mon.textfile_dir }}
    - matches:
      - '^gpufleet_cluster\.prom\.[0-9]+$'
    - rmdirs: False
    - onlyif: test -d {{ mon.textfile_dir }}
