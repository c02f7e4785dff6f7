"""python -m speclab theory: the speedup model (speclab.theory) for a given cost ratio c: breakeven
acceptance and speedup by K, and the best K, at each acceptance rate a."""
from __future__ import annotations

import argparse

from speclab import theory
from speclab.cli.main import command_parser


def build_parser() -> argparse.ArgumentParser:
    t = command_parser("theory")
    t.add_argument("--c", type=float, required=True, help="draft step cost / target step cost")
    t.add_argument("--alpha", type=float, nargs="+", default=[0.6, 0.7, 0.8, 0.9])
    t.add_argument("--k-max", type=int, default=8)
    return t


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    print(f"c = {args.c}")
    print(f"{'K':>3} {'breakeven a':>12} " + " ".join(f"{'S(a=' + str(a) + ')':>10}" for a in args.alpha))
    for k in range(1, args.k_max + 1):
        be = theory.breakeven_alpha(k, args.c)
        print(f"{k:3d} {be:12.3f} " + " ".join(f"{theory.speedup(a, k, args.c):10.2f}" for a in args.alpha))
    for a in args.alpha:
        print(f"best K at a={a}: {theory.best_k(a, args.c, args.k_max)}")


if __name__ == "__main__":
    main()
