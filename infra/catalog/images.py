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


def osfinger(name: str | None) -> str | None:
    """The OS of a named image (the default when None); None for a cloud's own image reference."""
    return IMAGES.get(name or DEFAULT_IMAGE)
