"""The largest sizes gpufleet accepts, shared by the stack spec and the command-line flags.

Kept apart from :mod:`gpufleet.spec` (pydantic) so that `compare` checks its flags without it.
"""

MAX_POOLS = 1000
MAX_POOL_NODES = 10_000
MAX_EPOCHS = 10_000
MAX_TOKENS = 1e15  # the largest published runs train on some 1e13 tokens
# capacity failover's limits per `up` (nodes.cloud.failover; `up --max-attempts/--failover-budget`)
FAILOVER_MAX_ATTEMPTS = 20  # Pulumi runs, every pool's together
FAILOVER_BUDGET_S = 2 * 3600.0  # no new attempt starts after this long
