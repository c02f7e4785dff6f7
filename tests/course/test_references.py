"""The bibliography: every entry names its authors (no anonymous source) and links to where a reader can
follow it (a url or a doi); arXiv links point at an abstract page; every key the book cites is defined."""
import json
import re
from pathlib import Path

import pytest
from pybtex.database import parse_file

ROOT = Path(__file__).resolve().parents[2]
BIB = ROOT / "book" / "references.bib"
ENTRIES = parse_file(str(BIB)).entries


def test_the_bibliography_parses_and_is_not_empty():
    assert len(ENTRIES) >= 40


@pytest.mark.parametrize("key", sorted(ENTRIES))
def test_every_entry_links_to_its_source(key):
    fields = {k.lower(): v for k, v in ENTRIES[key].fields.items()}
    assert "url" in fields or "doi" in fields, f"{key} has neither a url nor a doi"
    if "url" in fields:
        assert re.match(r"https://\S+$", fields["url"]), f"{key}: url {fields['url']!r} is not one https address"
        if "arxiv.org" in fields["url"]:
            assert re.match(r"https://arxiv\.org/abs/\d{4}\.\d{4,5}$", fields["url"]), f"{key}: {fields['url']}"


@pytest.mark.parametrize("key", sorted(ENTRIES))
def test_every_entry_names_its_authors(key):
    people = ENTRIES[key].persons.get("author", [])
    assert people, f"{key} has no author"
    names = " ".join(str(p) for p in people).lower()
    for word in ("anonymous", "unknown", "third-party", "secondary source"):
        assert word not in names, f"{key}'s author is {names!r}"


def cited_keys() -> dict[str, set[str]]:
    """Every key cited with {cite}`...` (or {cite:p}, {cite:t}) in the book's pages and the labs page."""
    pages = sorted((ROOT / "book").glob("*.ipynb")) + sorted((ROOT / "book").glob("*.md")) + \
        sorted((ROOT / "labs").glob("*.md"))
    found: dict[str, set[str]] = {}
    for page in pages:
        text = page.read_text()
        if page.suffix == ".ipynb":
            text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"] if c["cell_type"] == "markdown")
        for group in re.findall(r"\{cite(?::\w+)?\}`([^`]+)`", text):
            for key in group.split(","):
                found.setdefault(key.strip(), set()).add(page.name)
    return found


def test_every_cited_key_is_in_the_bibliography():
    missing = {key: sorted(pages) for key, pages in cited_keys().items() if key not in ENTRIES}
    assert not missing, f"cited but not in references.bib: {missing}"
