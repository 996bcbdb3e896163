{%- from tpldir ~ "/map.jinja" import mapdata as nccl with context %}

nccl-clean-package-pkg-removed:
  pkg.removed:
    - pkgs: {{ nccl.packages | json }}
