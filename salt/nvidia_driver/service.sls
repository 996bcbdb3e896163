{%- from tpldir ~ "/map.jinja" import mapdata as drv, live with context %}
{%- if live %}
{%- if drv.persistenced %}

nvidia_driver-service-persistenced-service-running:
  service.running:
    - name: nvidia-persistenced
    - enable: True
    - require:
      - sls: {{ tpldir }}.package
{%- endif %}
{%- if drv.fabric_manager %}

nvidia_driver-service-fabricmanager-service-running:
  service.running:
    - name: nvidia-fabricmanager
    - enable: True
    - require:
      - sls: {{ tpldir }}.package
{%- endif %}
{%- else %}

nvidia_driver-service-test-nop:
  test.nop:
    - name: services are not managed on this host (gpufleet:live is false)
{%- endif %}
