"""The training-step benchmark a node runs on itself (``gpufleet bench``).

``train_steps.py`` runs ON the node with the node's own PyTorch: it imports nothing but the standard
library and torch (an import-linter contract keeps it so), so that the one file can be copied to a rack
host over SSH and run there as it is run here (``gpufleet bench --here``). The controller writes its
plan (which models, their shapes and batches) and reads its JSON answer; predictions, MFU and
the catalog stay on the controller's side (``gpufleet.fleet.bench``).
"""
