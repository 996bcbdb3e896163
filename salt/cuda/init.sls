{%- from tpldir ~ "/map.jinja" import mapdata as cuda with context %}
{%- from "lib/packages.jinja" import packages with context %}
{%- set major, minor = (cuda.version | string).split(".")[:2] %}
{%- set pkgs = {} %}{%- do packages(tpldir, pkgs, fmt={"major": major, "minor": minor}) %}
{%- set prefix = cuda.prefix.format(version=major ~ "." ~ minor) %}
include:
  - nvidia_driver.repo

cuda-package-toolkit-pkg-installed:
  pkg.installed:
    - name: {{ pkgs.toolkit.names[0] }}
    - require:
      - sls: nvidia_driver.repo

cuda-config-profile-file-managed:
  file.managed:
    - name: {{ cuda.profile_file }}
    - mode: "0644"
    - contents: |
        # managed by gpufleet (cuda)
        export CUDA_HOME={{ prefix }}
        case ":$PATH:" in *":{{ prefix }}/bin:"*) ;; *) export PATH={{ prefix }}/bin:$PATH ;; esac
