{#- node_exporter on every node, with its textfile collector reading gpufleet's own metrics (the node
    agent's gpufleet.prom) from mon.textfile_dir: node_exporter's README, "Textfile Collector"
    (--collector.textfile.directory; *.prom files, written atomically), read 2026-11-27. -#}
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
{%- else %}
    # not its Recommends (prometheus-node-exporter-collectors, then smartmontools, nvme-cli, ipmitool, openipmi,
    # moreutils: 21 packages on Debian 12 instead of 1), which clean would leave (monitoring.server says more)
    - install_recommends: False
{%- endif %}

monitoring-node_exporter-textfile-dir-file-directory:
  file.directory:
    - name: {{ mon.textfile_dir }}
    - mode: "0755"
    - makedirs: True

monitoring-node_exporter-args-file-managed:
  file.managed:
    - name: {{ mon.node_exporter_env }}
    - mode: "0644"
    - contents: |
        # managed by gpufleet (monitoring.node_exporter)
        {{ mon.node_exporter_env_var }}="--collector.textfile.directory={{ mon.textfile_dir }} --web.listen-address=:{{ mon.ports.node_exporter }}"
    - require:
      - pkg: monitoring-node_exporter-package-pkg-installed
{%- if live %}

monitoring-node_exporter-service-running:
  service.running:
    - name: {{ mon.node_exporter_service }}
    - enable: True
    - require:
      - file: monitoring-node_exporter-textfile-dir-file-directory
    - watch:
      - pkg: monitoring-node_exporter-package-pkg-installed
      - file: monitoring-node_exporter-args-file-managed
{%- endif %}
