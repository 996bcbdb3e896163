{#- The Slurm node names' program (files/gpufleet-slurm-prolog says why and how): on a compute node slurmd's Prolog,
    the job's nodes' names in /etc/hosts at the addresses Slurm has for them (slurm.conf names it only where compute
    nodes are cloud slots: gpufleet.configure.slurm PROLOG_PROGRAM; on a rack's hosts it lies unused); on the
    controller, which is in no job, the node agent runs it with --all on each run. The controller's slots program. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as slurm, configured, role with context %}
{%- if configured %}

slurm-prolog-program-file-managed:
  file.managed:
    - name: {{ slurm.prolog_program }}
    - source: salt://{{ tpldir }}/files/gpufleet-slurm-prolog
    - mode: "0755"   # slurm.conf(5): executable by root, readable by all users
{%- if role == "controller" %}

# slurmctld's PrologSlurmctld where compute nodes are cloud slots (files/gpufleet-slurm-slots says why): run as
# SlurmUser at each allocation; the controller's state (daemon.sls) drains the slots no node holds with it
slurm-slots-program-file-managed:
  file.managed:
    - name: {{ slurm.slots_program }}
    - source: salt://{{ tpldir }}/files/gpufleet-slurm-slots
    - mode: "0755"
{%- endif %}
{%- endif %}
