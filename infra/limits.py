"""The largest sizes gpufleet accepts, shared by the stack spec and the command-line flags.

Kept apart from :mod:`gpufleet.spec` (pydantic) so that `compare` checks its flags without it.
"""

MAX_POOLS = 1000
MAX_POOL_NODES = 10_000
MAX_EPOCHS = 10_000
MAX_TOKENS = 1e15  # the largest published runs train on some 1e13 tokens
