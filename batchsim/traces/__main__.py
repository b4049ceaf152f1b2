import sys

from .fetch import main

sys.exit(main())
