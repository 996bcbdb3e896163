"""The OS images gpufleet knows by name, and the OS each one is (as Salt names it).

Each cloud maps these names to its own image reference (an AMI name pattern, an image family,
a marketplace URN) in ``gpufleet.clouds.<cloud>``; a pool may also give the cloud's own
reference, which says nothing about the OS.
"""

# name -> the OS as Salt names it (grains osfinger): what the NVIDIA states check it against
IMAGES: dict[str, str] = {
    "ubuntu-22.04": "Ubuntu-22.04",
    "ubuntu-24.04": "Ubuntu-24.04",
    "ubuntu-hpc-22.04": "Ubuntu-22.04",
    "rocky-9": "Rocky-9",
}
DEFAULT_IMAGE = "ubuntu-22.04"
# The cloud pools of a Slurm stack that confines jobs with cgroups (its default) boot Ubuntu 24.04 unless
# they name an image: 22.04's Slurm 21.08 has no cgroup v2 plugin (configure.software), so no Slurm stack
# would run on the default. Every other stack keeps 22.04 for now: the clouds find an image by its name
# (an AMI name pattern, an image family, a marketplace URN), so a new default would boot another OS on a
# cluster already up at its next `up` (a replaced fleet, new scale set instances), unasked.
SLURM_IMAGE = "ubuntu-24.04"


def osfinger(name: str | None) -> str | None:
    """The OS of a named image (the default when None); None for a cloud's own image reference."""
    return IMAGES.get(name or DEFAULT_IMAGE)
