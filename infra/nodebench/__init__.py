"""The training-step benchmark a node runs on itself (``gpufleet bench``).

``train_steps.py`` runs ON the node with the node's own PyTorch: it imports nothing but the standard
library and torch (an import-linter contract keeps it so), so that the one file can be copied to a rack
host over SSH and run there as it is run here (``gpufleet bench --here``). The controller writes its
plan (which models, their shapes and batches) and reads its JSON answer; predictions, MFU and
the catalog stay on the controller's side (``gpufleet.fleet.bench``).
"""

from importlib import resources


def source() -> bytes:
    """The node script as it is sent to a node (over SSH to a rack host, in the bench request to a cloud node)."""
    return resources.files(__name__).joinpath("train_steps.py").read_bytes()
