"""The providers gpufleet knows, by name. Cheap to import (nothing but these names).

Each name is a key of the cloud registry (``gpufleet.clouds.provider``): the implementation of
``"aws"`` is the folder ``gpufleet/clouds/aws/``. A fourth cloud is one folder there and one
name here.
"""

CLOUDS = ("aws", "gcp", "azure")  # created and torn down through their APIs; resources carry gpufleet tags
PROVIDERS = (*CLOUDS, "baremetal")  # and racks: machines that exist, reached over SSH
