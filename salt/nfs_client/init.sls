{%- from tpldir ~ "/map.jinja" import mapdata as nfs, live with context %}

nfs_client-package-pkg-installed:
  pkg.installed:
    - name: {{ nfs.package }}
{%- for m in nfs.mounts %}

# on a host that is not live (shared kernel) the mount is written to fstab, not mounted
nfs_client-mount-{{ m.mount }}-mount-mounted:
  mount.mounted:
    - name: {{ m.mount }}
    - device: {{ m.server }}:{{ m.export }}
    - fstype: nfs
    - opts: {{ m.get("options", nfs.options) }}
    - mkmnt: True
    - persist: True
    - mount: {{ live }}
    - require:
      - pkg: nfs_client-package-pkg-installed
{%- endfor %}
