"""The operations a user asks for, one module per command (``up``, ``down``, ``status``, ``reap``,
``check``, ``refresh``, ...). The CLI parses, calls one of these and renders what it returns; what
several operations share lives below them (loading a stack: ``gpufleet.stacks``)."""
