{%- from tpldir ~ "/map.jinja" import mapdata as cuda with context %}
{%- from "lib/packages.jinja" import packages with context %}
{%- set major, minor = (cuda.version | string).split(".")[:2] %}
{%- set pkgs = {} %}{%- do packages(tpldir, pkgs, fmt={"major": major, "minor": minor}) %}

cuda-clean-toolkit-pkg-removed:
  pkg.removed:
    - name: {{ pkgs.toolkit.names[0] }}

cuda-clean-profile-file-absent:
  file.absent:
    - name: {{ cuda.profile_file }}
