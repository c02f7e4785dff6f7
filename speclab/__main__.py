"""python -m speclab: the command line (speclab.cli; the map of commands is speclab/cli/main.py)."""
import sys

from speclab.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
