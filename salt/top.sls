{#- For salt-master/minion fleets: each minion gets the formulas gpufleet chose for its pool,
    from the pillar gpufleet builds (gpufleet:states). salt-ssh runs apply the same list. -#}
base:
  '*':
{%- for sls in salt["pillar.get"]("gpufleet:states", []) %}
    - {{ sls }}
{%- endfor %}
