{#- Slurm: munge with the cluster's key, then slurmctld (role controller) or slurmd with gpufleet's
    health check (role compute), each from the files gpufleet rendered for the whole cluster. One
    part per file, in the order they apply; clean.sls undoes them. -#}
include:
  - .package
  - .munge_key
  - .config
  - .spool
  - .health
  - .prolog
  - .munge_service
  - .accounting
  - .daemon
