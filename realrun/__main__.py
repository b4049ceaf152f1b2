"""``python -m realrun``: see ``realrun.cli``."""

import sys

from .cli import main

sys.exit(main())
