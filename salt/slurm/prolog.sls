{#- slurmd's Prolog (role compute): the job's nodes' Slurm names in /etc/hosts, at the addresses Slurm has for them
    (files/gpufleet-slurm-prolog says why and how). slurm.conf names it only where compute nodes are cloud slots
    (gpufleet.configure.slurm PROLOG_PROGRAM); on a rack's hosts it lies unused. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as slurm, configured, role with context %}
{%- if configured and role == "compute" %}

slurm-prolog-program-file-managed:
  file.managed:
    - name: {{ slurm.prolog_program }}
    - source: salt://{{ tpldir }}/files/gpufleet-slurm-prolog
    - mode: "0755"   # slurm.conf(5): executable by root, readable by all users
{%- endif %}
