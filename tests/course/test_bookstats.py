"""speclab.course.bookstats counts what book-style.md measures, and `python -m speclab book` prints it."""
import json
import re

import nbformat

from speclab.cli import book as book_cli
from speclab.course import bookstats


def write_notebook(path, cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    nbformat.write(nb, path)
    return path


def test_a_page_is_counted_as_a_reader_sees_it(tmp_path):
    hidden = nbformat.v4.new_code_cell("\n".join(f"x{i} = {i}" for i in range(30)))
    hidden.metadata["tags"] = ["hide-input"]
    shown = nbformat.v4.new_code_cell("a = 1\nb = 2\nprint(a + b)")
    shown.outputs = [nbformat.v4.new_output("stream", text="y" * 120 + "\nshort\n")]
    plot = nbformat.v4.new_code_cell("figure('fig-1', fig)")
    plot.metadata["tags"] = ["remove-output"]
    plot.outputs = [nbformat.v4.new_output("display_data", data={"image/png": "AAAA", "text/plain": "<Figure>"})]
    bare = nbformat.v4.new_code_cell("fig")
    bare.outputs = [nbformat.v4.new_output("display_data", data={"image/png": "AAAA"})]
    prose = nbformat.v4.new_markdown_cell(
        "# Title\n\nThe draft ran 1.5x, 2.1x, 3, 4, 5, 6, 7, 8, 9 and {glue:text}`r:.2f` on EAGLE-2.\n\n"
        "Two words `code span` $x^2$.\n\n```{glue:figure} fig-1\n:name: fig-1\n\nA caption.\n```\n")
    path = write_notebook(tmp_path / "p.ipynb", [prose, hidden, shown, plot, bare])
    stats = bookstats.page_stats(path)
    assert stats.code_lines == 5 and stats.longest_cell == 3          # the hidden 30 lines are not counted
    assert stats.wide_lines == 1                                        # the 120-character line
    assert stats.heavy_paragraphs == 1                                  # ten numbers, one of them glued
    assert stats.images == 2 and stats.captioned == 1                   # the glued figure, and one bare image
    assert stats.words == 16 + 3       # a code span or a glued value is one word, maths none


def test_references_without_a_link_are_named(tmp_path):
    bib = tmp_path / "r.bib"
    bib.write_text("@article{a,\n  title = {A},\n  url = {https://arxiv.org/abs/1}\n}\n\n"
                   "@misc{b,\n  title = {B}\n}\n\n@article{c,\n  doi = {10.1/x}\n}\n")
    assert bookstats.unlinked_references(bib) == ["b"]


def test_the_book_command_prints_a_row_a_page_in_toc_order(capsys):
    assert book_cli.main(["stats", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    pages = [p.stem for p in bookstats.book_pages()]
    assert [r["page"] for r in rows] == pages and pages[0].startswith("00")


def test_execute_refuses_a_page_that_is_not_in_the_book(capsys):
    assert book_cli.main(["execute", "--pages", "99_nothing"]) == 2
    assert "no page" in capsys.readouterr().err


def test_every_page_of_the_book_keeps_to_the_style():
    """book-style: a page of at most about 4,000 words of prose, no visible code cell over 25 lines and at most
    about 250 visible lines, no printed line past the column, every figure captioned; every source linked."""
    problems = []
    for path in bookstats.book_pages():
        s = bookstats.page_stats(path)
        problems += [f"{s.page}: {what}" for what, bad in [
            (f"{s.words} words of prose (split the page)", s.words > 4200),
            (f"a visible cell of {s.longest_cell} lines (hide plumbing, or move it to speclab.course)", s.longest_cell > 25),
            (f"{s.code_lines} visible lines of code", s.code_lines > 250),
            (f"{s.wide_lines} printed lines over {bookstats.PRINT_WIDTH} characters", s.wide_lines > 0),
            (f"{s.images - s.captioned} figures without a caption (glue:figure)", s.images > s.captioned)] if bad]
    problems += [f"references.bib: {key} has no url or doi" for key in bookstats.unlinked_references()]
    assert not problems, "\n".join(problems)


def test_execute_takes_a_page_by_its_full_name_or_a_chapter_by_its_prefix():
    def stems(pages):
        return [p.stem for p in book_cli.chosen_pages(pages)]
    assert stems(["08_eagle"]) == stems(["08_eagle.ipynb"]) == ["08_eagle"]
    assert len(stems(["08"])) > 1 and all(s.startswith("08") for s in stems(["08"]))
    assert stems(None) == [p.stem for p in bookstats.book_pages()]


def test_every_chapter_ends_in_the_same_frame():
    """book-style rule 9: each chapter's last page closes with what to remember, then the exercises, then its lab
    (chapter 0: its labs), in that order, once each."""
    last: dict[str, object] = {}
    for path in bookstats.book_pages():  # in toc order: a chapter's last page comes last
        if re.match(r"\d\d_", path.name):
            last[path.name[:2]] = path
    problems = []
    for path in last.values():
        nb = nbformat.read(path, as_version=4)
        heads = [line[3:].lower() for c in nb.cells if c.cell_type == "markdown"
                 for line in c.source.splitlines() if line.startswith("## ")]
        kinds = [k for h in heads for k in ("remember", "exercises", "lab")
                 if (k in h if k != "lab" else h.startswith("lab"))]
        if kinds != ["remember", "exercises", "lab"]:
            problems.append(f"{path.name}: closing sections {kinds}, not remember, exercises, lab")
    assert len(last) == 14 and not problems, "\n".join(problems)
