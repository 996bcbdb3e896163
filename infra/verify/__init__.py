"""`gpufleet verify` on the controller's side: what each node should show (``expect``), the
bundle of node-side checks sent to it (``bundle``, of ``gpufleet.nodecheck``), running it on rack
hosts over SSH (``rack``) and the per-node verdicts (``report``). Cloud nodes run the same
bundle from their state tree (``clouds/node_agent.py``)."""
