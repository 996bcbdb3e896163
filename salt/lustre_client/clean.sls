{%- from tpldir ~ "/map.jinja" import mapdata as lustre, fmt with context %}
{%- for m in lustre.mounts %}

lustre_client-clean-{{ m.mount }}-mount-unmounted:
  mount.unmounted:
    - name: {{ m.mount }}
    - device: {{ m.device }}
    - persist: True
{%- endfor %}

lustre_client-clean-repo-pkgrepo-absent:
  pkgrepo.absent:
{%- if grains.get("os_family") == "Debian" %}
    - name: deb {{ (lustre.repo or lustre.flavors[lustre.flavor].repo).format(**fmt) }}
    - file: {{ lustre.repo_file }}
{%- else %}
    - name: gpufleet-lustre
{%- endif %}
