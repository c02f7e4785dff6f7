"""python -m speclab card: measure the bundled pair (or a pair folder) and write its model card, with a
section for each method whose weights ship beside the target; --only re-measures one section."""
from __future__ import annotations

import argparse
from pathlib import Path

from speclab.cli.main import command_parser
from speclab.cli.options import set_threads
from speclab.train.card import model_card, replace_section
from speclab.measure.converted_card import converted_card
from speclab.methods import REGISTRY
from speclab.models import BUNDLED_DIR, CONVERTED_PAIRS

# the registry's methods with weights shipped beside the target and a section of the card (Method.card), by
# the folder the weights ship in (speclab/pairs/stdlib/<folder>): --only's names
def sections() -> dict[str, str]:
    return {m.bundled: m.name for m in REGISTRY.values() if m.bundled and m.card is not None}


ONLY = sections()


def build_parser() -> argparse.ArgumentParser:
    c = command_parser("card")
    c.add_argument("--threads", type=int, default=None, help="CPU threads for torch")
    c.add_argument("--pair-dir", default=None, help="folder with target/, draft/, draft-plain/, training.json "
                   "(default: the bundled pair)")
    c.add_argument("--pair", choices=sorted(CONVERTED_PAIRS), default=None, help="a converted pair's card instead "
                   "(speclab/pairs/<pair>/MODEL_CARD.md), rewritten from its training records and --bench records")
    c.add_argument("--bench", type=Path, action="append", default=[], help="--pair: a bench record (bench --json) "
                   "to show by task; repeat for several (greedy, sampled)")
    c.add_argument("--lossless", type=Path, default=None, help="--pair: the record of evaluate --lossless "
                   "(evaluate --json), shown as the card's lossless section")
    c.add_argument("--num-prompts", type=int, default=4)
    c.add_argument("--max-new-tokens", type=int, default=128)
    c.add_argument("--out", default=None, help="default: MODEL_CARD.md in the pair folder")
    c.add_argument("--only", choices=list(sections()), default=None,
                   help="re-measure only this section of the card (the Medusa heads, an EAGLE head, the MTP module, "
                   "the exit adapters or the parallel draft shipped with the target) and keep the rest")
    return c


def marker(pair_dir: Path, name: str) -> Path:
    """The file whose presence says the method's weights are in the pair folder."""
    return pair_dir / REGISTRY[name].bundled / REGISTRY[name].card.marker


def card_to_update(args, pair_dir: Path, out: Path) -> tuple[str, list[str]]:
    """The card to start from and the methods whose sections to (re)measure: a new card and all of them, or
    with --only, the card as it is and that one."""
    if not args.only:
        return model_card(pair_dir, args.num_prompts, args.max_new_tokens), list(sections().values())
    name = sections()[args.only]
    if not marker(pair_dir, name).exists():
        raise SystemExit(f"no trained {args.only} head in {marker(pair_dir, name).parent}: train it with "
                         f"python -m speclab train {REGISTRY[name].train} --target DIR --out DIR --install")
    return (out.read_text() if out.exists() else ""), [name]


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    set_threads(args.threads)
    if args.pair:
        out = Path(args.out) if args.out else CONVERTED_PAIRS[args.pair].folder / "MODEL_CARD.md"
        out.write_text(converted_card(args.pair, args.bench, args.lossless))
        print(out.read_text())
        print(f"written to {out}")
        return
    pair_dir = Path(args.pair_dir) if args.pair_dir else BUNDLED_DIR
    out = Path(args.out) if args.out else pair_dir / "MODEL_CARD.md"
    card, names = card_to_update(args, pair_dir, out)
    for name in names:
        if marker(pair_dir, name).exists():
            method = REGISTRY[name]
            section = method.card.write(method, pair_dir, args.num_prompts, args.max_new_tokens)
            card = replace_section(card, section.split("\n", 1)[0], section)
    out.write_text(card)
    print(card)
    print(f"written to {out}")


if __name__ == "__main__":
    main()
