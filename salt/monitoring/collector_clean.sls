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
