{%- from tpldir ~ "/map.jinja" import mapdata as nccl with context %}
{%- set version = nccl.version_format.format(version=nccl.version, cuda=nccl.cuda) %}
include:
  - nvidia_driver.repo

nccl-package-pkg-installed:
  pkg.installed:
    - pkgs:
{%- for p in nccl.packages %}
      - {{ p }}: "{{ version }}"
{%- endfor %}
    - hold: {{ nccl.hold }}
    - require:
      - sls: nvidia_driver.repo
