{%- from tpldir ~ "/map.jinja" import mapdata as mon with context %}
include:
{%- if mon.node_exporter %}
  - .node_exporter
{%- endif %}
{%- if mon.dcgm %}
  - .dcgm
{%- endif %}
