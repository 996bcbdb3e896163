"""Configuration of nodes with Salt: formulas, pillar from the stack file, the salt-ssh runner."""

# The formulas under salt/, in the order they are applied.
FORMULAS = ("node_base", "nvidia_driver", "cuda", "nccl", "container_runtime", "fabric", "lustre_client",
            "nfs_client", "frameworks", "monitoring", "verify_tools", "slurm")
# What needs a GPU to be installed for real; on a host without one these run with test=True.
GPU_STATES = ("nvidia_driver", "cuda", "nccl", "container_runtime", "monitoring.dcgm", "verify_tools")
# What a node booted from a current golden image still applies: what is its own (mounts of its
# cluster's file systems, its fabric's addressing); every other formula is in the image.
NODE_STATES = ("fabric", "lustre_client", "nfs_client")
