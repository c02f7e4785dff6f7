"""python -m speclab: the command line (speclab.cli)."""
from speclab.cli.main import main

if __name__ == "__main__":
    main()
