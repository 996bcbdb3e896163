{%- from tpldir ~ "/map.jinja" import mapdata as base with context %}

node_base-packages-pkg-installed:
  pkg.installed:
    - pkgs: {{ base.packages | json }}
