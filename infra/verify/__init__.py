"""`gpufleet verify` on the controller's side: what each node should show (``expect``), the
bundle of node-side checks sent to it (``bundle``, of ``gpufleet.nodecheck``) and the per-node
verdicts (``report``). Each kind of node runs the bundle its own way (``gpufleet.nodes``: rack
hosts over SSH, cloud nodes from their state tree)."""
