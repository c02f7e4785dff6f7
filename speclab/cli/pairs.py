"""python -m speclab pairs: the bundled pair, the pairs converted from the package registry (smollm2) and
the hub pairs load_pair knows, with their sizes and where they are."""
from __future__ import annotations

import argparse

from speclab.cli.main import command_parser
from speclab import packaged
from speclab.models import BUNDLED_DIR, CONVERTED_PAIRS, HUB_PAIRS


def build_parser() -> argparse.ArgumentParser:
    return command_parser("pairs")


def main(argv: list[str] | None = None) -> None:
    build_parser().parse_args(argv)
    print(f"bundled (default): {BUNDLED_DIR}")
    for name, pair in CONVERTED_PAIRS.items():
        folder = packaged.converted_dir(pair.packaged)
        state = "converted" if packaged.is_converted(folder) else "converted on first use"
        draft = pair.draft_dir if pair.has_draft() else "none yet (python -m speclab train draft)"
        print(f"{name:14} {pair.about}\n{'':14} target {folder} ({state}); draft {draft}")
    for name, p in HUB_PAIRS.items():
        print(f"{name:14} target {p.target:38} draft {p.draft:38} ~{p.weights_gb:.1f} GB weights (16-bit), "
              f"fits a 16 GB T4: {'yes' if p.fits_t4 else 'no'}")


if __name__ == "__main__":
    main()
