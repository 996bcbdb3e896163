"""The checks a node runs on itself to prove it is a healthy GPU node (``gpufleet verify``).

This package runs ON the node: rack hosts get it over SSH, cloud nodes find it in the state
tree their agent fetched. It is shipped as one zip application (``gpufleet.verify.bundle``) and
run by the node's own ``python3``, so it imports nothing but the standard library and its own
modules (an import-linter contract and a test that runs the bundle with ``python3 -I`` keep it
so). ``parsers`` read what the tools print, ``checks`` judge it against the expectations the
controller computed (``gpufleet.verify.expect``), ``runner`` is the entry point.
"""
