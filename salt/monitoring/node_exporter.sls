{%- from tpldir ~ "/map.jinja" import mapdata as mon, live with context %}
{%- if grains.get("os_family") == "RedHat" %}
include:
  - nvidia_driver.repo   # CRB, then EPEL, which has node-exporter on EL 9
{%- endif %}

monitoring-node_exporter-package-pkg-installed:
  pkg.installed:
    - name: {{ mon.node_exporter_package }}
{%- if grains.get("os_family") == "RedHat" %}
    - require:
      - sls: nvidia_driver.repo
{%- endif %}
{%- if live %}

monitoring-node_exporter-service-running:
  service.running:
    - name: {{ mon.node_exporter_service }}
    - enable: True
    - require:
      - pkg: monitoring-node_exporter-package-pkg-installed
{%- endif %}
