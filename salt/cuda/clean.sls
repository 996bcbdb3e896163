{%- from tpldir ~ "/map.jinja" import mapdata as cuda with context %}
{%- set major, minor = (cuda.version | string).split(".")[:2] %}

cuda-clean-toolkit-pkg-removed:
  pkg.removed:
    - name: {{ cuda.package.format(major=major, minor=minor) }}

cuda-clean-profile-file-absent:
  file.absent:
    - name: {{ cuda.profile_file }}
