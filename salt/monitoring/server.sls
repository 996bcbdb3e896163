{#- Prometheus and Alertmanager on the monitor host (README, "The monitor host"): the distribution's
    packages, the files gpufleet rendered for the cluster (gpufleet.monitoring.scrape: prometheus.yml,
    alertmanager.yml; the stack's alert rules), each checked by the program's own checker before it
    lands (Salt's check_cmd: a broken file never replaces a working one), Prometheus listening on the
    cluster-side address only, Alertmanager on loopback only (where Prometheus sends to it), reloaded
    when a file changes, restarted when their flags do. server_clean.sls (through clean.sls) undoes it. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as mon with context %}
{%- set srv = mon.server %}
{%- set pkgs = mon.get("server_packages") or {} %}
{%- from tpldir ~ "/server.jinja" import listen, listen_host with context %}
{%- if not pkgs.get("prometheus") %}

monitoring-server-unsupported-test-fail_without_changes:
  test.fail_without_changes:
    - name: "monitoring.server: no Prometheus package gpufleet has checked for {{ grains.get('osfinger', grains.get('os_family')) }}; put the monitor on a Debian 12 or Ubuntu 22.04/24.04 host (monitoring: {host: ...})"
{%- elif not listen %}

monitoring-server-no-cluster-address-test-fail_without_changes:
  test.fail_without_changes:
    - name: "monitoring.server: this host has no IPv4 address in the cluster's network {{ srv.cluster_cidr }}, where Prometheus must listen; put the monitor on a node of the cluster's network (monitoring: {host: ...})"
{%- else %}
include:
  - monitoring.collector   # the cluster's spend, budgets and Slurm, for node_exporter's textfile collector
{%- if srv.grafana_files %}
  - monitoring.grafana     # Grafana beside them (monitoring.grafana: true)
{%- endif %}
{%- set conf = srv.conf_dir %}

{#- the daemons' flags first: the packages' postinst starts both at once (deb-systemd-invoke start) with
    /etc/default's ARGS, which ship empty: Prometheus on 0.0.0.0:9090, Alertmanager on 0.0.0.0:9093 with its
    gossip on 0.0.0.0:9094 (prometheus 2.42.0+ds-5+deb12u1, prometheus-alertmanager 0.25.0-1+b4), and so they
    would stay whenever a check_cmd below fails (no restart). Salt's apt install keeps a conffile already
    there (--force-confold --force-confdef, salt/modules/aptpkg.py, Salt 3008). #}
monitoring-server-packages-pkg-installed:
  pkg.installed:
    - pkgs: {{ ([pkgs.prometheus, pkgs.alertmanager] + ([pkgs.promtool] if pkgs.get("promtool") else [])) | json }}
    # not their Recommends: prometheus recommends prometheus-node-exporter, which recommends the collectors
    # (smartmontools, nvme-cli, ipmitool, openipmi, moreutils and their timers): 21 packages on Debian 12, which clean
    # would leave; Salt's apt passes --no-install-recommends only when told (modules/aptpkg.py, Salt 3008.3)
    - install_recommends: False
    - require:
      - file: monitoring-server-prometheus-args-file-managed
      - file: monitoring-server-alertmanager-args-file-managed

monitoring-server-marker-file-managed:
  file.managed:
    - name: {{ srv.marker }}
    - makedirs: True
    - contents: "monitoring.server installed Prometheus and Alertmanager here (clean removes them)"

monitoring-server-rules-dir-file-directory:
  file.directory:
    - name: {{ conf }}/rules
    - mode: "0755"
    - require:
      - pkg: monitoring-server-packages-pkg-installed
{%- if srv.rules %}

monitoring-server-rules-file-managed:
  file.managed:
    - name: {{ conf }}/rules/gpufleet.yml
    - contents_pillar: monitoring:server:rules
    - mode: "0644"
    - check_cmd: promtool check rules
    - require:
      - file: monitoring-server-rules-dir-file-directory
{%- else %}

monitoring-server-rules-file-absent:
  file.absent:
    - name: {{ conf }}/rules/gpufleet.yml
{%- endif %}

monitoring-server-prometheus-config-file-managed:
  file.managed:
    - name: {{ conf }}/prometheus.yml
    - contents_pillar: monitoring:server:prometheus_yml
    - mode: "0644"
    - check_cmd: promtool check config
    - require:
      - pkg: monitoring-server-packages-pkg-installed
{%- if srv.rules %}
      - file: monitoring-server-rules-file-managed
{%- endif %}

monitoring-server-alertmanager-config-file-managed:
  file.managed:
    - name: {{ conf }}/alertmanager.yml
    - contents_pillar: monitoring:server:alertmanager_yml
    - mode: "0640"
    - group: prometheus  # a webhook URL may carry a token: not for every local user
    - check_cmd: amtool check-config
    - require:
      - pkg: monitoring-server-packages-pkg-installed

{#- the daemons' flags (prometheus 2.42 and alertmanager 0.25 --help): retention by time and size, the
    address each listens on, and the URL Prometheus's links name (an alert's generatorURL, which a receiver shows:
    derived from the host's name and port if omitted, a dead link outside the cluster; the pillar's is where
    `gpufleet dashboard CLUSTER --prometheus --port 9090` serves it on the reader's machine); Alertmanager's gossip port (--cluster.listen-address, 0.0.0.0:9094 by
    default) is off: one Alertmanager, no peers.
    Alertmanager listens on loopback only: its GET /api/v2/status serves the whole configuration, the
    webhook URL and any token in it included (a webhook's `url` is a plain URL, not a SecretURL that
    marshals as <secret>: config/notifiers.go at v0.25.0), unauthenticated; Prometheus, its only client,
    sends to 127.0.0.1 (gpufleet.monitoring.scrape). One --web.listen-address is also all that the
    Alertmanagers of our OSes parse: it is a kingpin String flag, not repeatable, in 0.23
    (cmd/alertmanager/main.go:197 at v0.23.0; Ubuntu 22.04 jammy-updates ships 0.23.0-4ubuntu0.3), and
    repeatable from 0.25 (exporter-toolkit's webflag; Debian 12 0.25.0-1+b4, Ubuntu 24.04 noble-updates
    0.26.0+ds-1ubuntu0.3); --config.file and --cluster.listen-address= (empty: HA off) are the same in
    all three (packages.ubuntu.com jammy-updates and noble-updates, prometheus/alertmanager tags v0.23.0
    and v0.26.0, read 2026-11-27), so the flags need no per-release override #}
monitoring-server-prometheus-args-file-managed:
  file.managed:
    - name: {{ mon.server_env.prometheus }}
    - mode: "0644"
    - contents: |
        # managed by gpufleet (monitoring.server)
        ARGS="--config.file={{ conf }}/prometheus.yml --web.listen-address={{ listen_host }}:{{ mon.ports.prometheus }} --storage.tsdb.retention.time={{ srv.retention }} --storage.tsdb.retention.size={{ srv.retention_size }}{{ " --web.external-url=" ~ srv.external_url if srv.external_url else "" }}"

monitoring-server-alertmanager-args-file-managed:
  file.managed:
    - name: {{ mon.server_env.alertmanager }}
    - mode: "0644"
    - contents: |
        # managed by gpufleet (monitoring.server)
        ARGS="--config.file={{ conf }}/alertmanager.yml --web.listen-address=127.0.0.1:{{ mon.ports.alertmanager }} --cluster.listen-address="

{#- a changed configuration or rule file is reloaded, not restarted: a restart replays Prometheus's WAL (minutes on
    a large TSDB) and resets every pending `for:` (an idle hour starts over at each apply), and Alertmanager's
    in-memory alert groups. Prometheus re-reads its files on SIGHUP, which its Debian unit sends on reload
    (`ExecReload=/bin/kill -HUP $MAINPID`, prometheus 2.42.0+ds-5+deb12u1) and so does its init script
    (init-d-script's do_reload_sigusr1: signal 1); Salt reloads instead of restarting when told `reload: True`
    (states/service.py mod_watch, Salt 3008.3). The flags ($ARGS) are read only at start, so they and a new package
    restart, in the state after this one: a reload first, never a SIGHUP straight after a start (a Go program
    killed by a SIGHUP that comes before it listens for one). #}
monitoring-server-prometheus-reload-service-running:
  service.running:
    - name: {{ mon.server_services.prometheus }}
    - reload: True
    - watch:
      - file: monitoring-server-prometheus-config-file-managed
{%- if srv.rules %}
      - file: monitoring-server-rules-file-managed
{%- endif %}

monitoring-server-alertmanager-service-running:
  service.running:
    - name: {{ mon.server_services.alertmanager }}
    - enable: True
    - watch:
      - pkg: monitoring-server-packages-pkg-installed
      - file: monitoring-server-alertmanager-args-file-managed

{#- Alertmanager reloads through its own POST /-/reload (on loopback, where it listens; it answers 500 with the
    error where the file does not load; prometheus.io/docs/alerting/0.25/configuration: "sending a SIGHUP to the
    process or sending an HTTP POST request to the /-/reload endpoint"): its Debian init script's reload signals
    nothing (start-stop-daemon --name prometheus-alertmanager, where the kernel keeps 15 characters of a process's
    name: no process matches, exit 1; prometheus-alertmanager 0.25.0-1+b4 with sysvinit-utils 3.06-4, seen on the
    test rack). After the state that starts or restarts it, retried while it comes up. #}
monitoring-server-alertmanager-reload-cmd-run:
  cmd.run:
    - name: >-
        python3 -c 'import urllib.request as u; u.build_opener(u.ProxyHandler({})).open(u.Request(
        "http://127.0.0.1:{{ mon.ports.alertmanager }}/-/reload", method="POST"), timeout=10)'
    - onchanges:
      - file: monitoring-server-alertmanager-config-file-managed
    - require:
      - service: monitoring-server-alertmanager-service-running
    - retry:
        attempts: 15
        interval: 2

monitoring-server-prometheus-service-running:
  service.running:
    - name: {{ mon.server_services.prometheus }}
    - enable: True
    - require:
      - service: monitoring-server-alertmanager-service-running
      - service: monitoring-server-prometheus-reload-service-running
    - watch:
      - pkg: monitoring-server-packages-pkg-installed
      - file: monitoring-server-prometheus-args-file-managed
{%- endif %}
