{%- from tpldir ~ "/map.jinja" import mapdata as fabric with context %}
{#- Removes gpufleet's fabric settings and the EFA/TCPX pieces it added; rdma-core stays. -#}

fabric-clean-files-file-absent:
  file.absent:
    - names:
      - {{ fabric.net_sysctl_file }}
      - {{ fabric.modules_file }}
      - {{ fabric.efa.dir }}
      - /etc/systemd/system/gpufleet-tcpx-rxdm.service

fabric-clean-opensm-service-dead:
  service.dead:
    - name: opensm
    - enable: False
    - onlyif: command -v systemctl && systemctl list-unit-files opensm.service | grep -q opensm
