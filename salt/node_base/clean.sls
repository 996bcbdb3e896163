{%- from tpldir ~ "/map.jinja" import mapdata as base with context %}
{#- Removes gpufleet's settings; the packages stay (other software may need them). -#}

{%- for id, path in [("sysctl", base.sysctl_file), ("memlock", base.memlock_file),
                     ("systemd-memlock", base.systemd_memlock_file), ("nouveau", base.blacklist_file)] %}
node_base-clean-{{ id }}-file-absent:
  file.absent:
    - name: {{ path }}
{%- endfor %}

node_base-clean-chrony-file-blockreplace:
  file.blockreplace:
    - name: {{ base.chrony.config }}
    - marker_start: "# BEGIN gpufleet time sources"
    - marker_end: "# END gpufleet time sources"
    - content: ""
    - onlyif: grep -q 'BEGIN gpufleet time sources' {{ base.chrony.config }}
