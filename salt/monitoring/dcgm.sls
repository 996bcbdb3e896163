{%- from "lib/packages.jinja" import packages with context %}
{%- from tpldir ~ "/map.jinja" import mapdata as mon, live with context %}
{%- set pkgs = {} %}{%- do packages("monitoring", pkgs, fmt={"major": mon.cuda_major}) %}
include:
  - nvidia_driver.repo
  - container_runtime

monitoring-dcgm-package-pkg-installed:
  pkg.installed:
    - name: {{ pkgs.dcgm.names[0] }}
    - require:
      - sls: nvidia_driver.repo

# the counters file the exporter is given: dcgm-exporter's defaults plus the error and throttle counters
# gpufleet's alert rules need (its own default-counters.csv leaves them commented out)
monitoring-dcgm-exporter-counters-file-managed:
  file.managed:
    - name: {{ mon.dcgm_exporter.counters }}
    - source: salt://{{ tpldir }}/files/gpufleet-counters.csv
    - mode: "0644"
    - makedirs: True

monitoring-dcgm-exporter-unit-file-managed:
  file.managed:
    - name: {{ mon.dcgm_exporter.unit }}
    - mode: "0644"
    - contents: |
        # managed by gpufleet (monitoring): GPU metrics on :{{ mon.ports.dcgm_exporter }}/metrics
        [Unit]
        After=docker.service nvidia-dcgm.service
        Requires=docker.service
        [Service]
        ExecStartPre=-/usr/bin/docker rm -f dcgm-exporter
        ExecStart=/usr/bin/docker run --name dcgm-exporter --gpus all --cap-add SYS_ADMIN -p {{ mon.ports.dcgm_exporter }}:9400 -v {{ mon.dcgm_exporter.counters }}:{{ mon.dcgm_exporter.counters }}:ro {{ mon.dcgm_exporter.image }} -f {{ mon.dcgm_exporter.counters }}
        Restart=always
        [Install]
        WantedBy=multi-user.target
    - require:
      - file: monitoring-dcgm-exporter-counters-file-managed
{%- if live %}

monitoring-dcgm-service-running:
  service.running:
    - name: nvidia-dcgm
    - enable: True
    - require:
      - pkg: monitoring-dcgm-package-pkg-installed

monitoring-dcgm-exporter-service-running:
  service.running:
    - name: gpufleet-dcgm-exporter
    - enable: True
    - watch:
      - file: monitoring-dcgm-exporter-unit-file-managed
      - file: monitoring-dcgm-exporter-counters-file-managed
{%- endif %}
