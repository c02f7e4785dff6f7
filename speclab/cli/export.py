"""python -m speclab export METHOD --format vllm|sglang --out DIR: a method's weights for a pair's target in
the layout a serving engine loads, with serving.json (the target's directory and the engine's settings);
--table prints how each engine names each method's settings (chapter 12's mapping table)."""
from __future__ import annotations

import argparse
import json

from speclab.cli.main import command_parser
from speclab.methods import METHODS
from speclab.serving import export, settings
from speclab.methods.checkpoints import ENGINES


def build_parser() -> argparse.ArgumentParser:
    p = command_parser("export")
    p.add_argument("method", nargs="?", choices=METHODS, help="the drafting method (vLLM's names)")
    p.add_argument("--format", choices=ENGINES, default="vllm", help="the engine whose layout and settings to write")
    p.add_argument("--out", help="the directory to write")
    p.add_argument("--pair", default=None, help="smollm2, or leave out for the bundled pair")
    p.add_argument("--weights", default=None, help="a directory of the method's trained weights (default: the "
                   "ones shipped for the pair's target)")
    p.add_argument("--k", type=int, default=3, help="draft tokens a round, in the written settings")
    p.add_argument("--table", action="store_true", help="print each engine's settings for every method at K = --k")
    return p


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.table:
        # every method at K = --k (layer skip drafting from the bundled target's first 6 layers)
        options = {name: settings.Options(k=args.k, exit_layer=6) for name in settings.writers()}
        for row in settings.mapping_table(options):
            print(f"== {row.pop('method')}")
            for engine, text in row.items():
                print(f"  {engine:13} {text}")
        return
    if args.method is None or args.out is None:
        parser.error("name a METHOD and --out DIR (or pass --table)")
    try:
        record = export.export(args.method, args.format, args.out, pair=args.pair, weights=args.weights, k=args.k)
    except ValueError as err:  # a method or layout the engine cannot take: say why, no traceback
        parser.exit(2, f"{parser.prog}: {err}\n")
    print(json.dumps(record, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
