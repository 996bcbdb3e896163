{%- from "lib/packages.jinja" import packages with context %}
{%- from tpldir ~ "/map.jinja" import mapdata as mon with context %}
{%- set pkgs = {} %}{%- do packages("monitoring", pkgs, fmt={"major": mon.cuda_major}) %}

monitoring-clean-services-service-dead:
  service.dead:
    - names: [gpufleet-dcgm-exporter, nvidia-dcgm, {{ mon.node_exporter_service }}]
    - enable: False
    - onlyif: command -v systemctl && test -d /run/systemd/system

monitoring-clean-packages-pkg-removed:
  pkg.removed:
    - pkgs:
      - {{ mon.node_exporter_package }}
      - {{ pkgs.dcgm.names[0] }}

monitoring-clean-unit-file-absent:
  file.absent:
    - name: {{ mon.dcgm_exporter.unit }}
