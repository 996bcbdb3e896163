{%- from tpldir ~ "/map.jinja" import mapdata as cr, live with context %}
{%- from "lib/packages.jinja" import packages with context %}
{%- set pkgs = {} %}{%- do packages(tpldir, pkgs) %}
{%- set debian = grains.get("os_family") == "Debian" %}
{%- if cr.engine != "none" %}
{%- if not debian %}

container_runtime-repo-engine-pkgrepo-managed:
  pkgrepo.managed:
    - name: docker-ce-stable
    - humanname: Docker CE Stable
    - baseurl: {{ cr.engine_repo }}
    - gpgcheck: 1
    - gpgkey: {{ cr.engine_repo_key }}
    - require_in:
      - pkg: container_runtime-package-engine-pkg-installed
{%- endif %}

container_runtime-package-engine-pkg-installed:
  pkg.installed:
    - pkgs: {{ cr.engine_packages[cr.engine] | json }}
{%- endif %}

{%- if debian %}
container_runtime-repo-toolkit-pkgrepo-managed:
  pkgrepo.managed:
    - humanname: NVIDIA Container Toolkit
    - name: deb [signed-by={{ cr.toolkit_keyring }}] {{ cr.toolkit_repo }}/stable/deb/$(ARCH) /
    - file: {{ cr.toolkit_repo_file }}
    - key_url: {{ cr.toolkit_repo }}/{{ cr.toolkit_key }}
    - signedby: {{ cr.toolkit_keyring }}
    - aptkey: False
{%- else %}
# as NVIDIA's own stable/rpm/nvidia-container-toolkit.repo: the repository metadata is signed
# (repo_gpgcheck), the RPMs are not (gpgcheck=0 or dnf refuses them)
container_runtime-repo-toolkit-pkgrepo-managed:
  pkgrepo.managed:
    - name: nvidia-container-toolkit
    - humanname: nvidia-container-toolkit
    - baseurl: {{ cr.toolkit_repo }}/stable/rpm/$basearch
    - repo_gpgcheck: 1
    - gpgcheck: 0
    - enabled: 1
    - gpgkey: {{ cr.toolkit_repo }}/{{ cr.toolkit_key }}
{%- endif %}

container_runtime-package-toolkit-pkg-installed:
  pkg.installed:
    - pkgs: {{ pkgs.toolkit.names | json }}
    - require:
      - pkgrepo: container_runtime-repo-toolkit-pkgrepo-managed

{%- if cr.engine != "none" %}
container_runtime-config-toolkit-cmd-run:
  cmd.run:
    - name: nvidia-ctk runtime configure --runtime={{ cr.engine }}
    - unless: grep -q nvidia {{ "/etc/docker/daemon.json" if cr.engine == "docker" else "/etc/containerd/config.toml" }}
    - require:
      - pkg: container_runtime-package-toolkit-pkg-installed
      - pkg: container_runtime-package-engine-pkg-installed
{%- if live %}

container_runtime-service-engine-service-running:
  service.running:
    - name: {{ cr.engine }}
    - enable: True
    - watch:
      - cmd: container_runtime-config-toolkit-cmd-run
{%- endif %}
{%- endif %}
