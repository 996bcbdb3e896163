{#- The role's daemon (slurmctld or slurmd), restarted when the cluster's files or key change; a node
    the files do not list yet gets a note instead: slurmctld would refuse its slurmd. -#}
{%- from tpldir ~ "/map.jinja" import mapdata as slurm, configured, listed, accounting, role, name with context %}
{%- if configured and slurm.start and not listed %}

slurm-daemon-not-listed-test-show_notification:
  test.show_notification:
    - text: "{{ name }} is not in this cluster's slurm.conf yet: `gpufleet configure` adds it"
{%- elif configured and slurm.start %}
include:
  - .config
  - .spool
  - .munge_service
{%- if accounting %}
  - .accounting
{%- endif %}

{%- if role == "compute" and slurm.get("self") %}

# a cloud node's slurmd runs as its slot, whatever its host name (slurmd -N): SLURMD_OPTIONS is read by Debian 12's
# slurmd.service (EnvironmentFile=-/etc/default/slurmd) and /etc/init.d/slurmd (slurmd 22.05.8-4+deb12u3), and by
# upstream's unit EPEL ships (etc/slurmd.service.in, /etc/sysconfig/slurmd; slurm-22-05-8-1, slurm-23-11-4-1). The
# file is gpufleet's on a cloud compute node, replaced whole (README, "Slurm"): its first line says so to whoever opens
# it (systemd's EnvironmentFile and the init script's shell both skip a # line)
slurm-daemon-options-file-managed:
  file.managed:
    - name: {{ slurm.daemon_options_file }}
    - contents: |
        # gpufleet: slurmd runs as this node's Slurm slot; this file is gpufleet's, replaced whole on each run
        SLURMD_OPTIONS="-N {{ slurm.self }}"
    - mode: "0644"

# its boot gate before slurmd first registers: drained unless the gate passed (its watch resumes it then), even
# where slurmd runs no health program (health_check_interval 0); a drain slurmctld did not confirm fails this
# state, so no slurmd starts (the agent's next run tries again)
slurm-daemon-gate-cmd-run:
  cmd.run:
    - name: {{ slurm.health_program }} --before-slurmd
    - env:
      - SLURMD_NODENAME: {{ slurm.self }}
    - unless: pgrep -x slurmd
    - retry:
        attempts: 6
        interval: 10
    - require:
      - file: slurm-health-program-file-managed
      - service: slurm-munge-service-running
{%- endif %}

slurm-daemon-service-running:
  service.running:
    - name: {{ slurm.services[role] }}
    - enable: True
    - require:
      - service: slurm-munge-service-running
      - file: slurm-spool-dirs-file-directory
{%- if role == "compute" and slurm.get("self") %}
      - cmd: slurm-daemon-gate-cmd-run
      - file: slurm-prolog-program-file-managed   # slurm.conf names it: a job before it would drain the node
{%- elif role == "controller" %}
      - file: slurm-slots-program-file-managed   # slurm.conf names it (PrologSlurmctld where nodes are slots)
{%- endif %}
{%- if accounting %}
      - cmd: slurm-dbd-cluster-cmd-run
{%- endif %}
    - watch:
{%- for name in slurm.files | sort %}
      - file: slurm-config-{{ name | replace(".", "_") }}-file-managed
{%- endfor %}
      - file: slurm-munge-key-file-managed
{%- if role == "compute" and slurm.get("self") %}
      - file: slurm-daemon-options-file-managed
{%- endif %}
{%- if role == "controller" %}

# a cloud slot no node holds (State=CLOUD, gpufleet.configure.slurm SLOT_STATE) is schedulable: "powered down"
# (src/slurmctld/node_scheduler.c, 22.05.8: weighted last, not left out), or plain IDLE+CLOUD once slurmctld restarted;
# drained for its gate until a node registers as it and its own gate passes (its watch resumes it). A job slurmctld
# gives one before is requeued by the same program (PrologSlurmctld): files/gpufleet-slurm-slots says why and how
slurm-daemon-slots-gate-cmd-run:
  cmd.run:
    - name: {{ slurm.slots_program }} --drain
    - retry:   # slurmctld takes a moment to answer after it starts
        attempts: 15
        interval: 2
    - require:
      - service: slurm-daemon-service-running
      - file: slurm-slots-program-file-managed
{%- endif %}
{%- endif %}
