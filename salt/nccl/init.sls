{%- from tpldir ~ "/map.jinja" import mapdata as nccl with context %}
{%- from "lib/packages.jinja" import packages with context %}
{%- set pkgs = {} %}{%- do packages(tpldir, pkgs, fmt={"version": nccl.version, "cuda": nccl.cuda}) %}
include:
  - nvidia_driver.repo

nccl-package-pkg-installed:
  pkg.installed:
    - pkgs:
{%- for p in (pkgs.runtime, pkgs.devel) %}
      - {{ p.names[0] }}: "{{ p.version }}"
{%- endfor %}
    - hold: {{ nccl.hold }}
    - require:
      - sls: nvidia_driver.repo
