{%- from tpldir ~ "/map.jinja" import mapdata as fabric, live with context %}
{%- set kind = fabric.kind %}
{%- set gpu = salt["pillar.get"]("gpufleet:gpu:model") %}

fabric-package-pkg-installed:
  pkg.installed:
    - pkgs: {{ fabric.packages[kind] | json }}

fabric-config-sysctl-file-managed:
  file.managed:
    - name: {{ fabric.net_sysctl_file }}
    - mode: "0644"
    - contents: |
        # managed by gpufleet (fabric: {{ kind }})
{%- for key, value in fabric.net_sysctl | dictsort %}
        {{ key }} = {{ value }}
{%- endfor %}
{%- if live %}

fabric-config-sysctl-cmd-run:
  cmd.run:
    - name: sysctl -p {{ fabric.net_sysctl_file }}
    - onchanges:
      - file: fabric-config-sysctl-file-managed
{%- endif %}

{%- if kind in ("infiniband", "roce") %}
fabric-config-modules-file-managed:
  file.managed:
    - name: {{ fabric.modules_file }}
    - mode: "0644"
    - contents: |
        # managed by gpufleet (fabric: {{ kind }})
        ib_umad
        rdma_ucm
{%- if fabric.ipoib %}
        ib_ipoib
{%- endif %}
{%- if live %}

fabric-config-modules-cmd-run:
  cmd.run:
    - name: systemctl restart systemd-modules-load
    - onchanges:
      - file: fabric-config-modules-file-managed
{%- endif %}
{%- if fabric.subnet_manager and kind == "infiniband" %}

fabric-package-opensm-pkg-installed:
  pkg.installed:
    - name: {{ fabric.opensm_package }}
{%- if live %}

fabric-service-opensm-service-running:
  service.running:
    - name: opensm
    - enable: True
    - require:
      - pkg: fabric-package-opensm-pkg-installed
{%- endif %}
{%- endif %}
{%- elif kind == "efa" %}
{%- set url = fabric.efa.url.format(version=fabric.efa.version) %}

# the installer tarball is pinned by version and SHA-256 (a mismatch stops here)
fabric-efa-download-cmd-run:
  cmd.run:
    - name: |
        set -e
        mkdir -p {{ fabric.efa.dir }}/{{ fabric.efa.version }} && cd {{ fabric.efa.dir }}/{{ fabric.efa.version }}
        curl -fsSL {{ url }} -o efa.tar.gz
        echo "{{ fabric.efa.sha256 }}  efa.tar.gz" | sha256sum -c -
        tar xzf efa.tar.gz
    - creates: {{ fabric.efa.dir }}/{{ fabric.efa.version }}/aws-efa-installer/efa_installer.sh
    - require:
      - pkg: fabric-package-pkg-installed

fabric-efa-cmd-run:
  cmd.run:
    - name: ./efa_installer.sh {{ fabric.efa.flags | join(" ") }}{{ " " ~ fabric.efa.gpu_flags | join(" ") if gpu else "" }}
    - cwd: {{ fabric.efa.dir }}/{{ fabric.efa.version }}/aws-efa-installer
    - creates: /opt/amazon/efa/bin/fi_info
    - require:
      - cmd: fabric-efa-download-cmd-run
{%- elif kind == "tcpx" %}

fabric-tcpx-dir-file-directory:
  file.directory:
    - name: {{ fabric.tcpx.lib_dir }}
    - makedirs: True

fabric-tcpx-plugin-cmd-run:
  cmd.run:
    - name: docker run --rm -v {{ fabric.tcpx.lib_dir }}:/var/lib/tcpx {{ fabric.tcpx.plugin_image }} install --install-nccl
    - creates: {{ fabric.tcpx.lib_dir }}/lib64/libnccl-net.so
    - require:
      - file: fabric-tcpx-dir-file-directory
      - sls: container_runtime

fabric-tcpx-rxdm-file-managed:
  file.managed:
    - name: /etc/systemd/system/gpufleet-tcpx-rxdm.service
    - contents: |
        # managed by gpufleet (fabric: tcpx): GPUDirect-TCPX receive-datapath manager
        [Unit]
        After=docker.service
        Requires=docker.service
        [Service]
        ExecStartPre=-/usr/bin/docker rm -f tcpx-rxdm
        ExecStart=/usr/bin/docker run --name tcpx-rxdm --pull=always --network=host --privileged --cap-add=NET_ADMIN \
          --gpus all -v /var/lib/nvidia/lib64:/usr/local/nvidia/lib64 -v /run/tcpx:/run/tcpx \
          --entrypoint {{ fabric.tcpx.rxdm_entrypoint }} {{ fabric.tcpx.rxdm_image }} {{ fabric.tcpx.rxdm_args }}
        Restart=always
        [Install]
        WantedBy=multi-user.target
{%- if live %}

fabric-tcpx-rxdm-service-running:
  service.running:
    - name: gpufleet-tcpx-rxdm
    - enable: True
    - watch:
      - file: fabric-tcpx-rxdm-file-managed
{%- endif %}
{%- endif %}
