{%- from tpldir ~ "/map.jinja" import mapdata as nfs with context %}
{#- Unmounts and removes gpufleet's fstab entries; the client package stays. -#}
{%- for m in nfs.mounts %}

nfs_client-clean-{{ m.mount }}-mount-unmounted:
  mount.unmounted:
    - name: {{ m.mount }}
    - device: {{ m.server }}:{{ m.export }}
    - persist: True
{%- endfor %}
