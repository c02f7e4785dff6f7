"""python -m speclab book: the book's pages measured (stats), or re-executed in place in the order of
_toc.yml, one kernel at a time on this machine (execute), so every page's machine line names one host.

    python -m speclab book stats
    python -m speclab book execute [--pages 08 09]   # nothing else CPU-heavy should run meanwhile
    python -m speclab book screenshots --out runs/screens   # the built book in headless Chromium
"""
from __future__ import annotations

import argparse
from dataclasses import asdict
import json
import sys
import time
from pathlib import Path

from nbclient import NotebookClient
import nbformat

from speclab.cli.main import command_parser
from speclab.course import bookstats, screens


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("book")
    sub = parser.add_subparsers(dest="action", required=True)
    stats = sub.add_parser("stats", help="prose words, visible code, wide output lines, figures and captions a page")
    stats.add_argument("--json", action="store_true", help="print the rows as JSON")
    run = sub.add_parser("execute", help="re-execute the book's notebooks in place, in the order of _toc.yml")
    run.add_argument("--pages", nargs="*", default=None,
                     help="only these pages: a page's full name (08_eagle) or a prefix (08: every page of chapter 8)")
    run.add_argument("--timeout", type=int, default=1800, help="seconds a cell may run (default 1800)")
    shots = sub.add_parser("screenshots", help="every page of the built book (jupyter-book build .) in headless "
                           "Chromium at a desktop and a phone width: full-page PNGs, and what scrolls sideways")
    shots.add_argument("--out", type=Path, required=True, help="folder for the PNGs and screens.json")
    shots.add_argument("--html", type=Path, default=bookstats.ROOT / "_build" / "html", help="the built book")
    shots.add_argument("--pages", nargs="*", default=None, help="only these pages (a name or a prefix, as execute)")
    shots.add_argument("--widths", nargs="+", type=int, default=list(screens.WIDTHS), help="pixels (default 1400 400)")
    shots.add_argument("--chromium", default="chromium", help="the browser's binary")
    return parser


def chosen_pages(pages: list[str] | None) -> list:
    """The book's pages that `pages` name, in toc order: a page's full name is that page alone (08_eagle, not
    08_eagle3 too), anything else a prefix (08: every page of chapter 8); None or [] is every page."""
    every = bookstats.book_pages()
    stems = {p.stem for p in every}
    wanted = [s.removesuffix(".ipynb") for s in pages or []]
    return [p for p in every if not wanted or any(p.stem == s if s in stems else p.stem.startswith(s) for s in wanted)]


def execute(pages, timeout: int) -> int:
    chosen = chosen_pages(pages)
    if not chosen:
        print(f"no page of _toc.yml is named or starts with {pages}", file=sys.stderr)
        return 2
    for path in chosen:
        start = time.perf_counter()
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        # no widget state kept: the book would load the widget scripts for a slider it cannot drive (and
        # nbclient's store_widget_state=False fails on a widget that captures output: chapter 4's slider)
        nb.metadata.pop("widgets", None)
        nbformat.write(nb, path)
        print(f"{path.relative_to(bookstats.ROOT)}: executed in {time.perf_counter() - start:.0f} s", flush=True)
    return 0


def take_screenshots(args) -> int:
    wanted = [s.removesuffix(".ipynb") for s in args.pages or []]
    every = bookstats.toc_files()
    pages = [f for f in every if not wanted or any(Path(f).name == s or Path(f).name.startswith(s) for s in wanted)]
    reports = screens.screenshots(args.html, args.out, pages, tuple(args.widths), args.chromium)
    for page, by_width in reports.items():
        print(page + ": " + "; ".join(f"{w}px: {r['height']} tall, code scrolling {r['code_scrolls']}, "
                                      f"tables {r['tables_scroll']}, prose or maths cut {r['prose_cut']}, "
                                      f"figures {r['figures']} (captioned {r['captions']})"
                                      + (", THE PAGE SCROLLS SIDEWAYS" if r["page_scrolls"] else "")
                                      + (f", {r['raw_tex']} raw TeX" if r["raw_tex"] else "")
                                      for w, r in by_width.items()))
    print(f"PNGs and screens.json in {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.action == "execute":
        return execute(args.pages, args.timeout)
    if args.action == "screenshots":
        return take_screenshots(args)
    stats = [bookstats.page_stats(p) for p in bookstats.book_pages()]
    if args.json:
        print(json.dumps([asdict(s) for s in stats], indent=1))
    else:
        print(bookstats.table(stats))
        missing = bookstats.unlinked_references()
        print(f"\nbibliography entries without a url or doi: {len(missing)}" + (f" ({', '.join(missing)})" if missing else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
