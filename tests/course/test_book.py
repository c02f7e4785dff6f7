"""The book: it builds with warnings as errors, its maths renders as maths, every chapter holds its
outputs, its code fits the rendered column, and every Colab install cell points at the repository
named in _config.yml; the README's environment has a Jupyter front end to open the notebooks with."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "book").glob("*.ipynb"))
LABS = sorted((ROOT / "labs").glob("**/*.ipynb"))
PAGES = CHAPTERS + sorted((ROOT / "book").glob("*.md")) + [ROOT / "labs" / "README.md"]
# Characters of code that fit one line of a code cell in the rendered book (sphinx-book-theme at its
# default width shows 89 monospace characters before the box scrolls; a line of 88 leaves a margin).
CODE_WIDTH = 88


def repository_url() -> str:
    return yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]


def test_there_are_chapters():
    assert len(CHAPTERS) >= 6


def test_the_package_fetches_records_from_the_configured_repository():
    from speclab.course.notebook import REPOSITORY
    assert repository_url() == f"https://github.com/{REPOSITORY}"


@pytest.mark.parametrize("path", CHAPTERS + LABS, ids=lambda p: p.name)
def test_colab_install_cell_uses_the_configured_repository(path):
    nb = json.loads(path.read_text())
    sources = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    installs = [s for s in sources if "google.colab" in s and "pip install" in s]
    assert installs, f"{path.name} has no Colab install cell"
    urls = set(re.findall(r"git\+(https://[^\s\"'@]+)", "\n".join(installs)))
    assert urls == {repository_url()}, f"{path.name} installs from {urls}, _config.yml says {repository_url()}"
    if path in CHAPTERS:  # any chapter may load_pair("smollm2"), whose conversion needs the extra's gguf
        assert all("speclab[smollm2] @ git+" in s for s in installs), f"{path.name}: install speclab[smollm2]"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_is_committed_with_outputs(path):
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    assert code and sum(bool(c.get("outputs")) for c in code) >= len(code) // 2, f"{path.name} lacks outputs"


def markdown_sources(path: Path) -> list[str]:
    """The markdown a page is written in: every markdown cell of a notebook, or the whole .md file."""
    if path.suffix == ".md":
        return [path.read_text()]
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown"]


def without_code(markdown: str) -> list[str]:
    """The lines of `markdown` outside fenced code blocks, with inline code spans blanked out."""
    lines, fence = [], None
    for line in markdown.splitlines():
        mark = re.match(r"\s*(`{3,}|~{3,})", line)
        if fence is None and mark and not line.strip().startswith(("```{", "````{")):
            fence = mark.group(1)
            lines.append("")
            continue
        if fence is not None:
            if line.strip().startswith(fence[0] * len(fence)) and line.strip().strip(fence[0]) == "":
                fence = None
            lines.append("")
            continue
        lines.append(re.sub(r"(`+)(?:(?!\1).)+?\1", lambda m: " " * len(m.group(0)), line))
    return lines


def maths_problems(markdown: str) -> list[str]:
    """Where the dollar signs of `markdown` cannot pair up into maths the way dollarmath reads them:
    an odd number of $ in a paragraph, or a $$ block that does not start a paragraph of its own (on a
    continuation line of a paragraph or a list item it is read as text with literal dollar signs)."""
    problems, paragraph, start, in_block = [], [], 0, False
    lines = without_code(markdown)
    for number, line in enumerate(lines + [""], 1):
        stripped = line.strip()
        if stripped.startswith("$$") and not in_block:
            previous = lines[number - 2].strip() if number > 1 else ""
            if previous and not previous.endswith("$$"):
                problems.append(f"line {number}: $$ on a continuation line (put a blank line before it): {stripped[:60]}")
            in_block = stripped.count("$$") == 1
        elif in_block and "$$" in stripped:
            in_block = False
        if stripped or in_block:
            paragraph.append(line)
            continue
        text = "\n".join(paragraph)
        if text.count("$$") % 2:
            problems.append(f"line {start}: unbalanced $$ in: {text.strip()[:80]!r}")
        elif text.replace("$$", "").replace("\\$", "").count("$") % 2:
            problems.append(f"line {start}: unbalanced $ in: {text.strip()[:80]!r}")
        paragraph, start = [], number + 1
    return problems


def test_maths_check_catches_the_broken_forms():
    assert maths_problems("1. Step.\n   $$a = b$$\n   and more.") != []            # continuation of a list item
    assert maths_problems("For both we can write\n$$x$$\nWith $q$ it is $p$.") != []
    assert maths_problems("a $x$ and $y") != []
    assert maths_problems("1. Step:\n\n   $$a = b,$$\n\n   and more $c$.") == []
    assert maths_problems("Text.\n\n$$\nI = 1\n$$\n\nMore, `a $ b` and\n```\nx = '$'\n```") == []


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_maths_delimiters_pair_up_in_the_source(path):
    problems = [f"cell {i}, {p}" for i, cell in enumerate(markdown_sources(path)) for p in maths_problems(cell)]
    assert not problems, f"{path.name}: " + "; ".join(problems)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_code_fits_the_rendered_column(path):
    nb = json.loads(path.read_text())
    wide = []
    for i, cell in enumerate(nb["cells"]):
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":   # code blocks in the prose (the solutions)
            source = "\n".join(re.findall(r"^```(?:python)?\n(.*?)^```", source, flags=re.M | re.S))
        wide += [f"cell {i}: {len(line)} characters: {line[:50]}..." for line in source.splitlines()
                 if len(line) > CODE_WIDTH]
    assert not wide, f"{path.name}: lines wider than {CODE_WIDTH} characters scroll in the book:\n" + "\n".join(wide)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_output_checks_are_cell_tags_in_the_book(path):
    """The book shows code cells as they are: nbval's markers go in cell tags (which the book does not
    render), not in a comment line a reader would puzzle over. Learner labs keep text markers, since
    Colab may drop metadata."""
    nb = json.loads(path.read_text())
    marked = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code" and "NBVAL_" in "".join(c["source"])]
    assert not marked, f"{path.name}: cells {marked} carry an NBVAL_ comment; use the tag nbval-check-output"
    tagged = [c for c in nb["cells"] if "nbval-check-output" in c.get("metadata", {}).get("tags", [])]
    assert tagged, f"{path.name}: no cell is output-checked (tag nbval-check-output)"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_embeds_no_widget_state(path):
    """A chapter that shows no widget must not carry widget state: the book would load the widget
    scripts from a CDN for nothing."""
    nb = json.loads(path.read_text())
    assert "widgets" not in nb["metadata"], f"{path.name}: metadata.widgets holds unused widget state"


def test_glue_leaves_no_raw_value_under_a_cell():
    """speclab.course.notebook.glue returns None: no cell shows a bare float such as 41.791044776119406."""
    for path in CHAPTERS:
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] == "code" and "".join(cell["source"]).rstrip().splitlines()[-1:][0:1]:
                last = "".join(cell["source"]).rstrip().splitlines()[-1]
                if last.startswith("glue("):
                    results = [o for o in cell.get("outputs", []) if o["output_type"] == "execute_result"]
                    assert not results, f"{path.name} cell {i} shows the value glued by its last line"


@pytest.fixture(scope="module")
def built_book(tmp_path_factory) -> Path:
    """The book built once, with warnings as errors: the folder of its HTML."""
    out = tmp_path_factory.mktemp("book")
    jb = shutil.which("jupyter-book") or str(Path(sys.executable).parent / "jupyter-book")
    result = subprocess.run([jb, "build", str(ROOT), "--path-output", str(out), "-W", "-n", "--keep-going"],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return out / "_build" / "html"


def test_book_builds_without_warnings(built_book):
    for chapter in CHAPTERS:
        assert (built_book / "book" / (chapter.stem + ".html")).exists()


def literal_dollars(page: Path) -> list[str]:
    """Text of a built page, outside code, outputs, scripts and typeset maths, that holds a $: maths
    that dollarmath did not recognise, left for the reader as dollar signs."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(page.read_text(), "html.parser")
    main = soup.find("main") or soup
    for tag in main.find_all(["pre", "code", "script", "style", "math"]):
        tag.decompose()
    for tag in main.find_all(class_=["math", "highlight", "cell_output", "output"]):
        tag.decompose()
    return [" ".join(text.split())[:120] for text in main.find_all(string=re.compile(r"\$"))]


def test_built_pages_have_no_literal_dollar_signs(built_book):
    pages = [built_book / "book" / f"{p.stem}.html" for p in CHAPTERS] + \
            [built_book / "book" / "intro.html", built_book / "labs" / "README.html"]
    found = {page.name: literal_dollars(page) for page in pages}
    assert all(page.exists() for page in pages)
    assert not any(found.values()), f"maths left as text with dollar signs: { {k: v for k, v in found.items() if v} }"


def test_built_pages_load_no_widget_scripts(built_book):
    for page in (built_book / "book").glob("*.html"):
        html = page.read_text()
        for script in ("jupyter-widgets", "html-manager", "require.min.js", "widget-state+json"):
            assert script not in html, f"{page.name} loads {script}"


def test_learner_environment_has_a_jupyter_front_end():
    """The README's setup installs JupyterLab, and the README says how to open the course locally."""
    requirements = (ROOT / "requirements.txt").read_text()
    assert re.search(r"^jupyterlab==", requirements, flags=re.M), "requirements.txt does not pin jupyterlab"
    jupyter = Path(sys.executable).parent / "jupyter"
    result = subprocess.run([str(jupyter), "lab", "--version"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and re.match(r"\d+\.\d+", result.stdout.strip()), result.stdout + result.stderr
    readme = (ROOT / "README.md").read_text()
    assert "jupyter lab" in readme and "book/" in readme and "labs/" in readme
