{%- from tpldir ~ "/map.jinja" import mapdata as vt with context %}

verify_tools-clean-file-absent:
  file.absent:
    - names:
      - {{ vt.prefix }}/bin/all_reduce_perf
      - {{ vt.prefix }}/bin/nvbandwidth
{%- for d in salt["file.find"](vt.prefix ~ "/src", maxdepth=1, type="d", name="nccl-tests-*") +
             salt["file.find"](vt.prefix ~ "/src", maxdepth=1, type="d", name="nvbandwidth-*") %}
      - {{ d }}
{%- endfor %}
