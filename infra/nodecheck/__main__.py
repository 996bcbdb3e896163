"""``python3 verify.pyz`` (the bundle) and ``python -m gpufleet.nodecheck`` both start here."""

import sys

from gpufleet.nodecheck.runner import main

sys.exit(main())
