"""How a page of the book reads, counted from its committed notebook (../shared/book-style.md's measures):
prose words, visible code, the longest visible cell, printed lines past the column, paragraphs heavy with
numbers, figures with and without captions; and the bibliography's entries without a link.

    python -m speclab book stats            # a row a page
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
import json
from pathlib import Path
import re

import yaml

ROOT = Path(__file__).resolve().parents[2]
HIDDEN = {"hide-input", "remove-input", "remove-cell"}   # tags that keep a cell's code out of view
NO_OUTPUT = {"remove-output", "remove-cell"}             # tags that keep a cell's output off the page
PRINT_WIDTH = 88                                         # characters of output that fit the code column (784 px at 1400)
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")     # 3, 1.27, 4,000 (not the 2 of EAGLE-2)
GLUED = re.compile(r"\{glue(?::text)?\}`[^`]+`")


@dataclass
class PageStats:
    page: str
    words: int            # prose, maths and code spans left out
    code_lines: int       # lines of code a reader sees without opening anything
    longest_cell: int     # lines of the longest visible code cell
    wide_lines: int       # printed output lines over PRINT_WIDTH characters
    heavy_paragraphs: int  # paragraphs with 10 or more numbers (glued ones count)
    images: int           # figures the page shows
    captioned: int        # of them, numbered with a caption


def paragraphs(markdown: str) -> list[str]:
    """The prose paragraphs of a markdown cell, code fences and directives left out."""
    text = re.sub(r"^(`{3,}|:{3,}).*?^\1\s*$", "", markdown, flags=re.M | re.S)
    return [p for p in re.split(r"\n\s*\n", text) if p.strip() and not p.lstrip().startswith("#")]


def prose_words(markdown: str) -> int:
    text = "\n\n".join(paragraphs(markdown))
    text = re.sub(r"\$\$.*?\$\$|\$[^$\n]*\$", " ", text, flags=re.S)
    text = re.sub(r"\{[\w:-]+\}`[^`]*`|`[^`]*`", " x ", text)   # a role or a code span reads as one word
    return len(re.findall(r"\S*[A-Za-z0-9]\S*", text))


def numbers_in(paragraph: str) -> int:
    glued = len(GLUED.findall(paragraph))
    text = GLUED.sub(" ", paragraph)
    text = re.sub(r"\{[\w:-]+\}`[^`]*`|`[^`]*`|\[[^\]]*\]\([^)]*\)", " ", text)   # code, roles, links
    text = re.sub(r"\b(?:chapter|section|lab|exercise|part|Figure|Fig\.)\s+\d[\d.]*", " ", text, flags=re.I)
    text = re.sub(r"^\s*\d+\.\s", " ", text, flags=re.M)   # a numbered list's own numbers
    return glued + len(NUMBER.findall(text))


def output_text(output: dict) -> str:
    if output.get("output_type") == "stream":
        return "".join(output.get("text", ""))
    data = output.get("data", {})
    if {"text/html", "image/png", "application/vnd.jupyter.widget-view+json"} & data.keys():
        return ""  # the page shows the table, the figure or the widget, not the text beside it
    return "".join(data.get("text/plain", ""))


def page_stats(path: Path) -> PageStats:
    nb = json.loads(path.read_text())
    words = code = longest = wide = heavy = images = captioned = 0
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        tags = set(cell.get("metadata", {}).get("tags", []))
        if cell["cell_type"] == "markdown":
            words += prose_words(source)
            heavy += sum(numbers_in(p) >= 10 for p in paragraphs(source))
            figures = len(re.findall(r"^[`:]{3,}\{(?:glue:figure|figure)\}", source, flags=re.M))
            images += figures
            captioned += figures
            continue
        if cell["cell_type"] != "code":
            continue
        if not tags & HIDDEN:
            lines = len(source.strip().splitlines())
            code += lines
            longest = max(longest, lines)
        if tags & NO_OUTPUT:
            continue
        for output in cell.get("outputs", []):
            wide += sum(len(line) > PRINT_WIDTH for line in output_text(output).splitlines())
            images += "image/png" in output.get("data", {}) or "image/svg+xml" in output.get("data", {})
    return PageStats(path.stem, words, code, longest, wide, heavy, images, captioned)


def toc_files(root: Path = ROOT) -> list[str]:
    """Every page of _toc.yml (the root page first), as the toc names it: a path without its suffix."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files: list[str] = [toc["root"]]

    def walk(entries):
        for entry in entries:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections", []) + entry.get("chapters", []))

    walk(toc["parts"])
    return files


def book_pages(root: Path = ROOT) -> list[Path]:
    """The book's notebooks, in the order of _toc.yml."""
    return [root / f"{f}.ipynb" for f in toc_files(root) if (root / f"{f}.ipynb").exists()]


def unlinked_references(bib: Path = ROOT / "book" / "references.bib") -> list[str]:
    """Keys of bibliography entries with neither a url nor a doi field."""
    entries = re.split(r"\n(?=@)", bib.read_text())
    found = []
    for entry in entries:
        key = re.match(r"\s*@\w+\{([^,]+),", entry)
        if key and not re.search(r"^\s*(url|doi)\s*=", entry, flags=re.M | re.I):
            found.append(key.group(1))
    return found


def table(stats: list[PageStats]) -> str:
    header = list(asdict(stats[0]))
    rows = [header] + [[str(v) for v in asdict(s).values()] for s in stats]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths)))
                     for r in rows)
