"""What a method declares for the command line, beside its registry entry: generate's flags (Flag) and the
bench's sweeps (Sweep: a bench flag whose values each make a row of one of the method's bench rows, side by
side, each value's row a Setting). The method modules declare their sweeps; the registry's BenchRow names the
one its row takes; speclab.measure.bench and speclab.cli.bench read them, and name none.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Flag:
    """One of generate's flags, declared by the method that reads it: add_argument(name, **spec). Methods that
    read the same setting declare the same Flag (eagle and eagle3's --eagle-tree); the command adds it once."""

    name: str  # "--lookahead"
    spec: Mapping = field(default_factory=dict)  # add_argument's keywords: type, default, metavar, help

    @property
    def dest(self) -> str:
        """argparse's name for it: "--exit-layer" -> "exit_layer"."""
        return self.name.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class Setting:
    """One value of a sweep as a row: `text`, what the row's label adds for it ("": none, the only value
    of its sweep), its load_drafter and speculative_generate options, and a K of its own (a K sweep's)."""

    text: str = ""
    load: Mapping = field(default_factory=dict)
    decode: Mapping = field(default_factory=dict)
    k: int | None = None


@dataclass(frozen=True)
class Sweep:
    """A bench setting that makes a row of a method's bench row per value, timed side by side: `name`, run_bench's
    keyword, the bench record's key and the flag's dest; `flag`, the bench's flag (its spec parses the values:
    nargs="+" and a type, or a type that reads a list); `rows(values)`, the Setting of each value's row;
    `default`, the values when none are given (None: the row as registered, no setting)."""

    name: str  # "lookahead"
    flag: Flag  # Flag("--lookahead", dict(type=..., nargs="+", metavar="W,N,G", help=...))
    rows: Callable[[Sequence], tuple[Setting, ...]]
    default: Sequence | None = None

    @property
    def option(self) -> str:
        """How to set it, for an error message: "--lookahead W,N,G (run_bench's lookahead)"."""
        return f"{self.flag.name} {self.flag.spec.get('metavar', self.name.upper())} (run_bench's {self.name})"


def named(values: Sequence, text: Callable, make: Callable) -> tuple[Setting, ...]:
    """make(value, its text) for each of `values`: one value adds nothing to the label, each of several
    adds text(value)."""
    values = list(values)
    return tuple(make(v, text(v) if len(values) > 1 else "") for v in values)


def int_list(text: str) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8], for --k-sweep and the other flags that take a list of integers."""
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers (e.g. 1,2,4,8), got {text!r}")
