"""python -m speclab pairs: the bundled pair and the hub pairs load_pair knows, with their sizes."""
from __future__ import annotations

import argparse

from speclab.cli.main import command_parser
from speclab.models import BUNDLED_DIR, HUB_PAIRS


def build_parser() -> argparse.ArgumentParser:
    return command_parser("pairs")


def main(argv: list[str] | None = None) -> None:
    build_parser().parse_args(argv)
    print(f"bundled (default): {BUNDLED_DIR}")
    for name, p in HUB_PAIRS.items():
        print(f"{name:14} target {p.target:38} draft {p.draft:38} ~{p.weights_gb:.1f} GB weights (16-bit), "
              f"fits a 16 GB T4: {'yes' if p.fits_t4 else 'no'}")


if __name__ == "__main__":
    main()
