{#- The tools `gpufleet verify` runs (gpufleet.nodecheck): nccl-tests' all_reduce_perf and
    nvbandwidth built against this node's NCCL and CUDA, fio, perftest, infiniband-diags; links in
    <prefix>/bin, where the checks look. DCGM comes with the monitoring formula. A change of NCCL or
    CUDA version builds into a new folder. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as vt with context %}
{%- set nt = vt.nccl_tests %}{%- set nb = vt.nvbandwidth %}
{%- set nt_src = vt.prefix ~ "/src/nccl-tests-" ~ nt.tag ~ "-nccl" ~ vt.nccl ~ "-cuda" ~ vt.cuda %}
{%- set nb_src = vt.prefix ~ "/src/nvbandwidth-" ~ nb.tag ~ "-cuda" ~ vt.cuda %}
include:
  - nccl
  - cuda

verify_tools-packages-pkg-installed:
  pkg.installed:
    - pkgs: {{ vt.packages | json }}

verify_tools-bin-file-directory:
  file.directory:
    - name: {{ vt.prefix }}/bin
    - makedirs: True

verify_tools-nccl-tests-cmd-run:
  cmd.run:
    - name: |
        set -e
        rm -rf {{ nt_src }}.part
        git clone --quiet --depth 1 --branch {{ nt.tag }} {{ nt.url }} {{ nt_src }}.part
        test "$(git -C {{ nt_src }}.part rev-parse HEAD)" = {{ nt.commit }}
        make -C {{ nt_src }}.part -j "$(nproc)" MPI=0 CUDA_HOME={{ vt.cuda_home }} NCCL_HOME=/usr
        mv {{ nt_src }}.part {{ nt_src }}
    - creates: {{ nt_src }}/build/all_reduce_perf
    - require:
      - pkg: verify_tools-packages-pkg-installed
      - sls: nccl
      - sls: cuda

verify_tools-nccl-tests-file-symlink:
  file.symlink:
    - name: {{ vt.prefix }}/bin/all_reduce_perf
    - target: {{ nt_src }}/build/all_reduce_perf
    - force: True
    - require:
      - cmd: verify_tools-nccl-tests-cmd-run
      - file: verify_tools-bin-file-directory

verify_tools-nvbandwidth-cmd-run:
  cmd.run:
    - name: |
        set -e
        rm -rf {{ nb_src }}.part
        git clone --quiet --depth 1 --branch {{ nb.tag }} {{ nb.url }} {{ nb_src }}.part
        test "$(git -C {{ nb_src }}.part rev-parse HEAD)" = {{ nb.commit }}
        cmake -S {{ nb_src }}.part -B {{ nb_src }}.part/build -DCMAKE_CUDA_COMPILER={{ vt.cuda_home }}/bin/nvcc
        cmake --build {{ nb_src }}.part/build -j "$(nproc)"
        mv {{ nb_src }}.part {{ nb_src }}
    - creates: {{ nb_src }}/build/nvbandwidth
    - require:
      - pkg: verify_tools-packages-pkg-installed
      - sls: cuda

verify_tools-nvbandwidth-file-symlink:
  file.symlink:
    - name: {{ vt.prefix }}/bin/nvbandwidth
    - target: {{ nb_src }}/build/nvbandwidth
    - force: True
    - require:
      - cmd: verify_tools-nvbandwidth-cmd-run
      - file: verify_tools-bin-file-directory
