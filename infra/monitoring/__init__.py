"""Seeing the fleet (README, "Monitoring"): the metrics gpufleet's alert rules and dashboards may name
(``names``), and what renders Prometheus's, Alertmanager's and Grafana's files for a stack.

How series are joined: every target Prometheus scrapes on a node (node_exporter, DCGM exporter) carries
the labels ``cluster``, ``pool`` and ``node`` (gpufleet's name of the node), set where the targets are
discovered, so a rule or panel joins a node's metrics ``on(node)``: never on ``instance`` (each exporter
has its own port) nor on DCGM's ``Hostname`` (the exporter's container's name). gpufleet's own metrics
ride on node_exporter's textfile collector and so carry no such labels of their own.
"""
