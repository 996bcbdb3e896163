"""gpufleet: infrastructure-as-code for GPU fleets.

The library lives in this package (built from ``infra/``); the typer CLI is
``gpufleet.cli`` (built from ``cli/``). Importing ``gpufleet`` stays cheap: no cloud
SDK and no Pulumi is imported here or by ``spec``, ``catalog``, ``perf`` or ``compare``.
"""

__version__ = "0.1.0"
