{#- The cluster's Slurm files (slurm.conf, gres.conf, cgroup.conf, topology.conf), from the pillar. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as slurm, configured with context %}
{%- if configured %}

slurm-config-dir-file-directory:
  file.directory:
    - name: {{ slurm.conf_dir }}
    - mode: "0755"

{%- for name in slurm.files | sort %}
{%- set lines = slurm.files[name].split("\n") %}
{%- set kept = lines | reject("in", slurm.defunct) | list %}

slurm-config-{{ name | replace(".", "_") }}-file-managed:
  file.managed:
    - name: {{ slurm.conf_dir }}/{{ name }}
{%- if kept | length < lines | length %}
    {#- the cluster's file less the lines this node's Slurm refuses (parameters' defunct) #}
    - contents: {{ kept | join("\n") | tojson }}
{%- else %}
    - contents_pillar: "slurm:files:{{ name }}"
{%- endif %}
    - mode: "0644"
    - require:
      - file: slurm-config-dir-file-directory
{%- endfor %}
{%- endif %}
