{%- from tpldir ~ "/map.jinja" import mapdata as nccl with context %}
{%- from "lib/packages.jinja" import packages with context %}
{%- set pkgs = {} %}{%- do packages(tpldir, pkgs, fmt={"version": nccl.version, "cuda": nccl.cuda}) %}

nccl-clean-package-pkg-removed:
  pkg.removed:
    - pkgs: {{ (pkgs.runtime.names + pkgs.devel.names) | json }}
