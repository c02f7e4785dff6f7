"""The book: it builds with warnings as errors, every chapter holds its outputs, and every Colab
install cell points at the repository named in _config.yml."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "book").glob("*.ipynb"))
LABS = sorted((ROOT / "labs").glob("**/*.ipynb"))


def repository_url() -> str:
    return yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]


def test_there_are_chapters():
    assert len(CHAPTERS) >= 6


@pytest.mark.parametrize("path", CHAPTERS + LABS, ids=lambda p: p.name)
def test_colab_install_cell_uses_the_configured_repository(path):
    nb = json.loads(path.read_text())
    sources = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    installs = [s for s in sources if "google.colab" in s and "pip install" in s]
    assert installs, f"{path.name} has no Colab install cell"
    urls = set(re.findall(r"git\+(https://[^\s\"'@]+)", "\n".join(installs)))
    assert urls == {repository_url()}, f"{path.name} installs from {urls}, _config.yml says {repository_url()}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_is_committed_with_outputs(path):
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    assert code and sum(bool(c.get("outputs")) for c in code) >= len(code) // 2, f"{path.name} lacks outputs"


def test_book_builds_without_warnings(tmp_path):
    jb = shutil.which("jupyter-book") or str(Path(sys.executable).parent / "jupyter-book")
    result = subprocess.run([jb, "build", str(ROOT), "--path-output", str(tmp_path), "-W", "-n", "--keep-going"],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    html = tmp_path / "_build" / "html"
    for chapter in CHAPTERS:
        assert (html / "book" / (chapter.stem + ".html")).exists()
