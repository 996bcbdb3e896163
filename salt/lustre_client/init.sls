{%- from tpldir ~ "/map.jinja" import mapdata as lustre, live, fmt, series with context %}
{%- from "lib/packages.jinja" import packages with context %}
{%- set flavor = lustre.flavors[lustre.flavor] %}
{%- set pkgs = {} %}{%- do packages(tpldir, pkgs, fmt=fmt) %}
{%- set client = lustre.get("package") and {"names": [lustre.package], "version": lustre.get("package_version", ""),
                                            "confirmed": true} or pkgs[lustre.flavor] %}
{%- set repo = (lustre.repo or flavor.repo).format(**fmt) %}
{%- set why = [] %}
{%- if not repo %}
{%-   do why.append("no Lustre client repository for " ~ grains.get("osfinger") ~ " (" ~ lustre.flavor ~ "): set lustre_client:repo in the pool's salt pillar to your site's mirror") %}
{%- elif "{el_release}" in flavor.repo and not fmt.el_release and not lustre.repo %}
{%-   do why.append("FSx for Lustre publishes no EL client for kernel series " ~ series ~ " (lustre_client:fsx_el_releases): boot a Rocky/RHEL 9 image with a listed kernel") %}
{%- elif not client or not client.confirmed %}
{%-   do why.append("no confirmed " ~ lustre.flavor ~ " Lustre client package for " ~ grains.get("osfinger") ~ (" (" ~ client.why ~ ")" if client else "") ~ (": " ~ client.names | join(" ") ~ " is unconfirmed" if client and client.names else "") ~ "; set lustre_client:package in the pool's salt pillar") %}
{%- endif %}
{%- if why %}

lustre_client-package-test-fail_without_changes:
  test.fail_without_changes:
    - name: "{{ why[0] }}"
{%- elif grains.get("os_family") == "Debian" %}

lustre_client-repo-pkgrepo-managed:
  pkgrepo.managed:
    - humanname: Lustre client ({{ lustre.flavor }})
{%- if flavor.key %}
    - name: deb [signed-by={{ lustre.keyring_dir }}/gpufleet-lustre.asc] {{ repo }}
    - key_url: {{ flavor.key }}
    - signedby: {{ lustre.keyring_dir }}/gpufleet-lustre.asc
    - aptkey: False
{%- else %}
    - name: deb {{ repo }}
{%- endif %}
    - file: {{ lustre.repo_file }}
{%- else %}

lustre_client-repo-pkgrepo-managed:
  pkgrepo.managed:
    - name: gpufleet-lustre
    - humanname: Lustre client ({{ lustre.flavor }})
    - baseurl: {{ repo }}
    - gpgcheck: {{ 1 if flavor.key else 0 }}
{%- if flavor.key %}
    - gpgkey: {{ flavor.key }}
{%- endif %}
{%- endif %}
{%- if not why %}

lustre_client-package-pkg-installed:
  pkg.installed:
    - pkgs:
{%- for p in client.names %}
      - {{ p }}{{ (': "' ~ client.version ~ '"') if client.version else "" }}
{%- endfor %}
    - require:
      - pkgrepo: lustre_client-repo-pkgrepo-managed
{%- for m in lustre.mounts %}

lustre_client-mount-{{ m.mount }}-mount-mounted:
  mount.mounted:
    - name: {{ m.mount }}
    - device: {{ m.device }}
    - fstype: lustre
    - opts: {{ m.get("options", lustre.mount_options) }}
    - mkmnt: True
    - persist: True
    - mount: {{ live }}
    - require:
      - pkg: lustre_client-package-pkg-installed
{%- endfor %}
{%- endif %}
