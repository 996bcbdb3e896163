{%- from tpldir ~ "/map.jinja" import mapdata as base, live with context %}
{%- if live %}

node_base-service-chrony-service-running:
  service.running:
    - name: {{ base.chrony.service }}
    - enable: True
    - require:
      - sls: {{ tpldir }}.packages
{%- if base.chrony.servers %}
    - watch:
      - file: node_base-config-chrony-file-blockreplace
{%- endif %}
{%- else %}

node_base-service-test-nop:
  test.nop:
    - name: services are not managed on this host (gpufleet:live is false)
{%- endif %}
