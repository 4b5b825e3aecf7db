"""``python3 -m health`` (on a host) or ``python -m provision.remote.health``: provision-health."""

import sys

from .check import main

sys.exit(main())
