{%- from tpldir ~ "/map.jinja" import mapdata as fw with context %}

frameworks-package-pkg-installed:
  pkg.installed:
    - pkgs: {{ fw.packages | json }}

frameworks-root-file-directory:
  file.directory:
    - name: {{ fw.root }}
    - mode: "0755"
    - makedirs: True
{%- for name, env in fw.envs | dictsort %}
{%- set dir = fw.root ~ "/" ~ name %}

frameworks-{{ name }}-venv-cmd-run:
  cmd.run:
    - name: {{ fw.python }} -m venv {{ dir }}
    - creates: {{ dir }}/bin/python
    - require:
      - pkg: frameworks-package-pkg-installed
      - file: frameworks-root-file-directory

frameworks-{{ name }}-requirements-file-managed:
  file.managed:
    - name: {{ dir }}/requirements.txt
    - mode: "0644"
    - contents: |
        # managed by gpufleet (frameworks: {{ name }})
{%- if env.get("index_url") %}
        --index-url {{ env.index_url }}
{%- endif %}
{%- for url in env.get("extra_index_urls", []) %}
        --extra-index-url {{ url }}
{%- endfor %}
{%- for p in env.packages %}
        {{ p }}
{%- endfor %}
    - require:
      - cmd: frameworks-{{ name }}-venv-cmd-run

# installs when the pins change, and again after a failed install (the stamp is written last)
frameworks-{{ name }}-pip-cmd-run:
  cmd.run:
    - name: >-
        {{ dir }}/bin/pip install --disable-pip-version-check --no-input --timeout {{ fw.pip_timeout }}
        -r {{ dir }}/requirements.txt && cp {{ dir }}/requirements.txt {{ dir }}/requirements.installed
    - unless: cmp -s {{ dir }}/requirements.txt {{ dir }}/requirements.installed
    - require:
      - file: frameworks-{{ name }}-requirements-file-managed
{%- endfor %}
