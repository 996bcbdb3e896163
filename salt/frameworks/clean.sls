{%- from tpldir ~ "/map.jinja" import mapdata as fw with context %}

frameworks-clean-root-file-absent:
  file.absent:
    - name: {{ fw.root }}
