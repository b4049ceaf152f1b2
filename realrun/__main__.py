"""``python -m realrun``: see ``realrun.cli``."""

import sys

# Guarded: vLLM (``--engine vllm``) starts its processes with spawn, which imports this module
# again.
if __name__ == "__main__":
    from .cli import main

    sys.exit(main())
