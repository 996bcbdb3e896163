"""The lines of a cluster's bill, named once. What `up` predicts (``engine.spend``, from each cloud's
``spend`` module) and what each cloud's bill is read as (``clouds/<cloud>/billing.py``) use these
names, so that `gpufleet cost` sets the bill against the prediction line by line."""

from __future__ import annotations

INSTANCES = "instances"
RESERVATION = "reservation"
VOLUMES = "volumes"
FILE_SYSTEM = "file-system"
NAT = "nat"
IPV4 = "ipv4"
BASTION = "bastion"
TRANSFER = "transfer"
# what a plan predicts, in the order a bill is shown
PREDICTED = (INSTANCES, RESERVATION, VOLUMES, FILE_SYSTEM, NAT, IPV4, BASTION, TRANSFER)
NODES = (INSTANCES, RESERVATION)  # what a pool's nodes are billed as: the instances, or the reservation they run in

# lines only a bill has
NETWORK = "network"  # a bill that keeps NAT and public addresses together (Azure's "Virtual Network" category)
NETWORK_PARTS = (NAT, IPV4)  # the predicted lines such a bill is compared with, added up
OTHER = "other"  # a charge the cloud's billing does not place on any line above
BILLED = (*PREDICTED, NETWORK, OTHER)
