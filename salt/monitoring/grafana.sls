{#- Grafana on the monitor host (monitoring.grafana: true), beside Prometheus (monitoring.server includes this where
    the pillar brings Grafana's files): Grafana's own package from its apt repository, whose signing key is trusted
    only with the fingerprint given here; grafana.ini listening on loopback only (`gpufleet dashboard CLUSTER`
    forwards to it there), anonymous access off, the admin's password and the signing secret from files only
    Grafana's user reads, made here and never sent anywhere; the monitor's Prometheus as its data source and
    gpufleet's dashboards, provisioned (gpufleet.monitoring.provisioning.monitor_files). Steps as Grafana's
    "Install Grafana on Debian or Ubuntu" (grafana.com/docs/grafana/latest/setup-grafana/installation/debian/,
    read 2026-11-28); server_clean.sls undoes it where its marker is. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as mon with context %}
{%- from tpldir ~ "/server.jinja" import listen_host with context %}
{%- set g = mon.grafana %}
{%- set srv = mon.server %}
{%- set prometheus = "http://" ~ listen_host ~ ":" ~ mon.ports.prometheus %}
{%- set fpr = g.key_fingerprint %}
{#- Grafana's key as apt is to trust it, into "$t/key" (in a folder "$t" the caller made): the served file imported
    into a gpg home of its own ("$t") and only the key whose primary fingerprint gpufleet pins exported from it,
    armored, with its self-signatures only (export-minimal); "$got" is the primary fingerprints that export holds.
    Apt checks a repository's InRelease against every key of its Signed-By file (sources.list(5), apt 2.6), so a
    second key served beside Grafana's (one armored block can hold several) must never reach the keyring (rev53d #1);
    fetched on every apply, so a key whose expiry Grafana extends (same fingerprint, a new self-signature, as in 2025:
    apt's EXPKEYSIG 963FA27710458545) replaces the installed copy (rev53d #5). -#}
{%- macro pinned_key() -%}
python3 -c 'import sys, urllib.request as u; sys.stdout.buffer.write(u.urlopen(sys.argv[1], timeout=60).read())' {{ g.key_url }} > "$t/served" && { gpg --homedir "$t" --batch --quiet --import "$t/served" 2>/dev/null || true; } && gpg --homedir "$t" --batch --armor --export-options export-minimal --export {{ fpr }} > "$t/key" 2>/dev/null && got=$(gpg --homedir "$t" --batch --show-keys --with-colons "$t/key" 2>/dev/null | awk -F: '$1 == "pub" {p = 1; next} p && $1 == "fpr" {print $10; p = 0}')
{%- endmacro %}

monitoring-grafana-marker-file-managed:
  file.managed:
    - name: {{ g.marker }}
    - makedirs: True
    - contents: "monitoring.grafana installed Grafana and its apt repository here (clean removes them)"

monitoring-grafana-gpg-pkg-installed:
  pkg.installed:
    - pkgs: [gpg]
    - install_recommends: False

{#- Grafana's key, trusted only if it is the one whose fingerprint gpufleet carries: a key served in its place (a
    mirror, a proxy, a compromised host) stops the apply here, before apt trusts anything it signs. The fingerprint:
    Grafana's signing key since its rotation of 2023-08-24 (grafana.com/blog/2023/09/06, "post-incident review and
    timeline for GPG signing key rotation"), as Grafana's own Puppet modules pin it for https://apt.grafana.com/gpg.key
    (read 2026-11-28; the key itself could not be fetched here). Armored, so `.asc` (sources.list(5): Signed-By
    takes a .asc or .gpg keyring). Skipped when the key fetched again is the installed copy. #}
monitoring-grafana-keyring-cmd-run:
  cmd.run:
    - name: |
        set -e
        t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
        got=; {{ pinned_key() }} || true
        if [ "$got" != "{{ fpr }}" ]; then
          served=$(gpg --homedir "$t" --batch --show-keys --with-colons "$t/served" 2>/dev/null | awk -F: '$1 == "fpr" {print $10}')
          echo "{{ g.key_url }} does not hold Grafana's key {{ fpr }} (it holds: $(echo ${served:-no key})): not trusted" >&2; exit 1
        fi
        install -d -m 0755 {{ g.keyring.rsplit("/", 1)[0] }}
        install -m 0644 "$t/key" {{ g.keyring }}
    - unless: {{ ('t=$(mktemp -d); trap \'rm -rf "$t"\' EXIT; ' ~ pinned_key() ~ ' && [ "$got" = "' ~ fpr ~ '" ] && cmp -s "$t/key" ' ~ g.keyring) | json }}
    - require:
      - pkg: monitoring-grafana-gpg-pkg-installed

monitoring-grafana-repo-file-managed:
  file.managed:
    - name: {{ g.repo_file }}
    - mode: "0644"
    - contents: "deb [signed-by={{ g.keyring }}] {{ g.repo }}"
    - require:
      - cmd: monitoring-grafana-keyring-cmd-run

monitoring-grafana-package-pkg-installed:
  pkg.installed:
    - name: {{ g.package }}
    - refresh: True
    - install_recommends: False
    - require:
      - file: monitoring-grafana-repo-file-managed

{#- the admin's password and the key Grafana signs and encrypts with (its default is a constant every install
    shares: conf/defaults.ini, [security] secret_key), made once on the host before Grafana's first start (its
    package does not start it, packaging/deb/control/postinst: the admin is created then, with this password);
    read through grafana.ini's $__file{} ("Variable expansion", grafana.com/docs/grafana/latest/setup-grafana/
    configure-grafana/: the file's whitespace trimmed) by Grafana's user only: 0600 in a 0700 folder, outside
    /etc/grafana, which the package's postinst makes root:grafana 0755 and its files 0640 on every upgrade #}
monitoring-grafana-secrets-dir-file-directory:
  file.directory:
    - name: {{ g.secrets_dir }}
    - user: {{ g.user }}
    - group: {{ g.user }}
    - mode: "0700"
    - makedirs: True
    - require:
      - pkg: monitoring-grafana-package-pkg-installed

monitoring-grafana-secrets-cmd-run:
  cmd.run:
    - name: |
        set -e
        umask 077
        for f in admin-password secret-key; do
          [ -s "{{ g.secrets_dir }}/$f" ] || python3 -c 'import secrets; print(secrets.token_urlsafe(24))' > "{{ g.secrets_dir }}/$f"
        done
    - unless: test -s {{ g.secrets_dir }}/admin-password -a -s {{ g.secrets_dir }}/secret-key
    - require:
      - file: monitoring-grafana-secrets-dir-file-directory

monitoring-grafana-secrets-file-managed:
  file.managed:
    - names:
      - {{ g.secrets_dir }}/admin-password
      - {{ g.secrets_dir }}/secret-key
    - replace: False  # their owner and mode only
    - user: {{ g.user }}
    - group: {{ g.user }}
    - mode: "0600"
    - require:
      - cmd: monitoring-grafana-secrets-cmd-run

{#- keys of conf/defaults.ini (grafana/grafana), each overriding its default there; the provisioning folder named
    here too, as a unit of the package's may pass none (packaging/deb/systemd/grafana-server.service, a stored
    version: no cfg:default.paths.provisioning), where Grafana reads conf/provisioning under its home #}
monitoring-grafana-ini-file-managed:
  file.managed:
    - name: {{ g.ini }}
    - mode: "0640"
    - group: {{ g.user }}
    - contents: |
        # managed by gpufleet (monitoring.grafana)
        [paths]
        provisioning = {{ g.provisioning_dir }}

        [server]
        http_addr = 127.0.0.1
        http_port = {{ mon.ports.grafana }}

        [security]
        admin_user = admin
        admin_password = $__file{{ "{" ~ g.secrets_dir }}/admin-password}
        secret_key = $__file{{ "{" ~ g.secrets_dir }}/secret-key}
        disable_gravatar = true

        [auth.anonymous]
        enabled = false

        [users]
        allow_sign_up = false

        [analytics]
        reporting_enabled = false
        check_for_updates = false
        check_for_plugin_updates = false
    - require:
      - file: monitoring-grafana-secrets-file-managed

{#- the data source, provider and dashboards; the data source names the monitor's Prometheus at the address it
    listens on (monitoring.server) in place of the pillar's placeholder #}
{%- for path, text in srv.grafana_files | dictsort %}

monitoring-grafana-provisioning-{{ loop.index }}-file-managed:
  file.managed:
    - name: {{ path }}
    - makedirs: True
    - mode: "0644"
    - contents: {{ text | replace(g.prometheus_placeholder, prometheus) | json }}
    - require:
      - pkg: monitoring-grafana-package-pkg-installed
    - require_in:
      - service: monitoring-grafana-service-running
{%- if "/provisioning/datasources/" in path %}
    - watch_in:
      - service: monitoring-grafana-service-running
{%- endif %}
{%- endfor %}

{#- a changed grafana.ini or data source is read at start only; the dashboards' folder is read again every
    updateIntervalSeconds (the provider's) #}
monitoring-grafana-service-running:
  service.running:
    - name: {{ g.service }}
    - enable: True
    - watch:
      - pkg: monitoring-grafana-package-pkg-installed
      - file: monitoring-grafana-ini-file-managed
