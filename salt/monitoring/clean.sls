{%- from tpldir ~ "/map.jinja" import mapdata as mon with context %}

monitoring-clean-services-service-dead:
  service.dead:
    - names: [gpufleet-dcgm-exporter, nvidia-dcgm, {{ mon.node_exporter_service }}]
    - enable: False
    - onlyif: command -v systemctl && test -d /run/systemd/system

monitoring-clean-packages-pkg-removed:
  pkg.removed:
    - pkgs:
      - {{ mon.node_exporter_package }}
      - {{ mon.dcgm_package.format(cuda_major=mon.cuda_major) }}

monitoring-clean-unit-file-absent:
  file.absent:
    - name: {{ mon.dcgm_exporter.unit }}
