"""The operations a user asks for, one module each: ``up``, ``down``, ``status``, ``reap``,
``check``, ``refresh`` (the catalog's prices), and ``stacks`` (loading a stack with every check).
The CLI parses, calls one of these and renders what it returns."""
