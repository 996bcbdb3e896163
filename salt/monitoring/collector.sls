{#- gpufleet's cluster metrics on the monitor host (monitoring.server includes it): the collector
    (files/gpufleet-cluster-metrics), its settings from the pillar's monitoring:collector (built by
    gpufleet.monitoring.collector.settings), and a systemd timer running it every `interval` seconds into
    node_exporter's textfile directory (textfile_dir). -#}
{%- from tpldir ~ "/map.jinja" import mapdata as mon, live with context %}
{%- from tpldir ~ "/collector.jinja" import collector as c with context %}

monitoring-collector-program-file-managed:
  file.managed:
    - name: {{ c.program }}
    - source: salt://{{ tpldir }}/files/gpufleet-cluster-metrics
    - mode: "0755"

monitoring-collector-settings-file-serialize:
  file.serialize:
    - name: {{ c.settings_file }}
    - serializer: json
    - dataset: {{ c.settings | json }}
    - mode: "0644"
    - makedirs: True

monitoring-collector-service-file-managed:
  file.managed:
    - name: /etc/systemd/system/{{ c.unit }}.service
    - mode: "0644"
    - contents: |
        # managed by gpufleet (monitoring.collector): the cluster's spend, budgets and Slurm for node_exporter
        [Unit]
        Description=gpufleet: the cluster's metrics for Prometheus
        [Service]
        Type=oneshot
        ExecStart={{ c.program }} --settings {{ c.settings_file }} --out {{ mon.textfile_dir }}

monitoring-collector-timer-file-managed:
  file.managed:
    - name: /etc/systemd/system/{{ c.unit }}.timer
    - mode: "0644"
    - contents: |
        # managed by gpufleet (monitoring.collector)
        [Unit]
        Description=gpufleet: the cluster's metrics every {{ c.interval }} s
        [Timer]
        OnActiveSec=0
        OnUnitActiveSec={{ c.interval }}
        [Install]
        WantedBy=timers.target
{%- if live %}

{#- systemd loads a changed unit file only on daemon-reload, and Salt's service state reloads only when its own
    unit's file changed (modules/systemd_service.py _check_for_unit_changes(name), Salt 3008.3): a changed .service
    (its program, settings or textfile path) would run its old ExecStart until the next reboot #}
monitoring-collector-units-cmd-run:
  cmd.run:
    - name: systemctl daemon-reload
    - onlyif: test -d /run/systemd/system
    - onchanges:
      - file: monitoring-collector-service-file-managed
      - file: monitoring-collector-timer-file-managed

{#- a host without a running systemd (a container, the test rack) has no timers: the program and its settings are
    there, run by hand or by the host's own scheduler #}
monitoring-collector-timer-service-running:
  service.running:
    - name: {{ c.unit }}.timer
    - enable: True
    - onlyif: test -d /run/systemd/system
    - watch:
      - file: monitoring-collector-service-file-managed
      - file: monitoring-collector-timer-file-managed
    - require:
      - file: monitoring-collector-program-file-managed
      - file: monitoring-collector-settings-file-serialize
      - cmd: monitoring-collector-units-cmd-run
{%- endif %}
