{#- The cluster's Slurm files (slurm.conf, gres.conf, cgroup.conf, topology.conf), from the pillar. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as slurm, configured with context %}
{%- if configured %}

slurm-config-dir-file-directory:
  file.directory:
    - name: {{ slurm.conf_dir }}
    - mode: "0755"

{%- for name in slurm.files | sort %}

slurm-config-{{ name | replace(".", "_") }}-file-managed:
  file.managed:
    - name: {{ slurm.conf_dir }}/{{ name }}
    - contents_pillar: "slurm:files:{{ name }}"
    - mode: "0644"
    - require:
      - file: slurm-config-dir-file-directory
{%- endfor %}
{%- endif %}
