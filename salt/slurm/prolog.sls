{#- The Slurm node names' program (files/gpufleet-slurm-prolog says why and how): on a compute node slurmd's Prolog,
    the job's nodes' names in /etc/hosts at the addresses Slurm has for them (slurm.conf names it only where compute
    nodes are cloud slots: gpufleet.configure.slurm PROLOG_PROGRAM; on a rack's hosts it lies unused); on the
    controller, which is in no job, the node agent runs it with --all on each run. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as slurm, configured with context %}
{%- if configured %}

slurm-prolog-program-file-managed:
  file.managed:
    - name: {{ slurm.prolog_program }}
    - source: salt://{{ tpldir }}/files/gpufleet-slurm-prolog
    - mode: "0755"   # slurm.conf(5): executable by root, readable by all users
{%- endif %}
