{%- from tpldir ~ "/map.jinja" import mapdata as lustre, live with context %}
{%- set flavor = lustre.flavors[lustre.flavor] %}
{%- set fmt = {"kernel": grains.get("kernelrelease", ""), "version": lustre.version,
               "codename": grains.get("oscodename", "")} %}
{%- set repo = (lustre.repo or flavor.repo).format(**fmt) %}
{%- if not repo %}

lustre_client-repo-test-fail_without_changes:
  test.fail_without_changes:
    - name: "no Lustre client repository for {{ grains.get('osfinger') }} ({{ lustre.flavor }}): set lustre_client:repo in the pool's salt pillar to your site's mirror"
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
{%- if repo %}

lustre_client-package-pkg-installed:
  pkg.installed:
    - pkgs:
{%- for p in flavor.packages %}
      - {{ p.format(**fmt) }}
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
