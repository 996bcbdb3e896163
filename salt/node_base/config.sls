{%- from tpldir ~ "/map.jinja" import mapdata as base, live with context %}
{%- set sysctl = dict(base.sysctl) %}
{%- if base.hugepages | int > 0 %}{%- do sysctl.update({"vm.nr_hugepages": base.hugepages | int}) %}{%- endif %}

node_base-config-sysctl-file-managed:
  file.managed:
    - name: {{ base.sysctl_file }}
    - mode: "0644"
    - contents: |
        # managed by gpufleet (node_base)
{%- for key, value in sysctl | dictsort %}
        {{ key }} = {{ value }}
{%- endfor %}

{%- if live %}
node_base-config-sysctl-cmd-run:
  cmd.run:
    - name: sysctl -p {{ base.sysctl_file }}
    - onchanges:
      - file: node_base-config-sysctl-file-managed
{%- endif %}

# RDMA registers (pins) GPU and host memory: unlimited memlock for users and services
node_base-config-memlock-file-managed:
  file.managed:
    - name: {{ base.memlock_file }}
    - mode: "0644"
    - makedirs: True
    - contents: |
        # managed by gpufleet (node_base): RDMA needs to pin memory
        *    soft    memlock    unlimited
        *    hard    memlock    unlimited

node_base-config-systemd-memlock-file-managed:
  file.managed:
    - name: {{ base.systemd_memlock_file }}
    - mode: "0644"
    - makedirs: True
    - contents: |
        # managed by gpufleet (node_base)
        [Manager]
        DefaultLimitMEMLOCK=infinity

# a host brought up again after `gpufleet down` is back in service
node_base-config-undrain-file-absent:
  file.absent:
    - name: {{ base.drained_marker }}

node_base-config-nouveau-file-managed:
  file.managed:
    - name: {{ base.blacklist_file }}
    - mode: "0644"
    - contents: |
        # managed by gpufleet (node_base): the NVIDIA driver needs nouveau out of the way
        blacklist nouveau
        options nouveau modeset=0

{%- if live %}
node_base-config-initramfs-cmd-run:
  cmd.run:
    - name: {{ base.initramfs_update }}
    - onchanges:
      - file: node_base-config-nouveau-file-managed
{%- endif %}

{%- if base.chrony.servers %}
node_base-config-chrony-file-blockreplace:
  file.blockreplace:
    - name: {{ base.chrony.config }}
    - marker_start: "# BEGIN gpufleet time sources"
    - marker_end: "# END gpufleet time sources"
    - append_if_not_found: True
    - content: |
{%- for server in base.chrony.servers %}
        server {{ server }} iburst prefer
{%- endfor %}
    - require:
      - sls: {{ tpldir }}.packages
{%- endif %}
