{#- Undo the monitoring formula: the node's exporters (and, on the monitor host, monitoring.server
    through server_clean: it acts only where its marker is). -#}
{%- from "lib/packages.jinja" import packages with context %}
{%- from tpldir ~ "/map.jinja" import mapdata as mon with context %}
{%- set pkgs = {} %}{%- do packages("monitoring", pkgs, fmt={"major": mon.cuda_major}) %}
include:
  - .server_clean

monitoring-clean-services-service-dead:
  service.dead:
    - names: [gpufleet-dcgm-exporter, nvidia-dcgm, {{ mon.node_exporter_service }}]
    - enable: False
    - onlyif: command -v systemctl && test -d /run/systemd/system

# a host without a running systemd (a container, the test rack): node_exporter's init script, which
# its package's removal does not run there
monitoring-clean-initscript-cmd-run:
  cmd.run:
    - name: /etc/init.d/{{ mon.node_exporter_service }} stop
    - onlyif: test -x /etc/init.d/{{ mon.node_exporter_service }}
    - unless: test -d /run/systemd/system

monitoring-clean-packages-pkg-removed:
  pkg.removed:
    - pkgs:
      - {{ mon.node_exporter_package }}
      - {{ pkgs.dcgm.names[0] }}
    - require:
      - cmd: monitoring-clean-initscript-cmd-run

monitoring-clean-files-file-absent:
  file.absent:
    - names:
      - {{ mon.dcgm_exporter.unit }}
      - {{ mon.dcgm_exporter.counters }}
      - {{ mon.node_exporter_env }}
