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

monitoring-dcgm-exporter-unit-file-managed:
  file.managed:
    - name: {{ mon.dcgm_exporter.unit }}
    - mode: "0644"
    - contents: |
        # managed by gpufleet (monitoring): GPU metrics on :{{ mon.dcgm_exporter.port }}/metrics
        [Unit]
        After=docker.service nvidia-dcgm.service
        Requires=docker.service
        [Service]
        ExecStartPre=-/usr/bin/docker rm -f dcgm-exporter
        ExecStart=/usr/bin/docker run --name dcgm-exporter --gpus all --cap-add SYS_ADMIN -p {{ mon.dcgm_exporter.port }}:9400 {{ mon.dcgm_exporter.image }}
        Restart=always
        [Install]
        WantedBy=multi-user.target
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
{%- endif %}
