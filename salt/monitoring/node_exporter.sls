{%- from tpldir ~ "/map.jinja" import mapdata as mon, live with context %}
{%- if mon.get("epel_package") %}

monitoring-node_exporter-epel-pkg-installed:
  pkg.installed:
    - name: {{ mon.epel_package }}
    - require_in:
      - pkg: monitoring-node_exporter-package-pkg-installed
{%- endif %}

monitoring-node_exporter-package-pkg-installed:
  pkg.installed:
    - name: {{ mon.node_exporter_package }}
{%- if live %}

monitoring-node_exporter-service-running:
  service.running:
    - name: {{ mon.node_exporter_service }}
    - enable: True
    - require:
      - pkg: monitoring-node_exporter-package-pkg-installed
{%- endif %}
