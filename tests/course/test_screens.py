"""The book in a browser: MathJax's CDN addresses map onto the local package, and a page that runs past
a phone's edge is caught (where Chromium is installed)."""
import shutil

import pytest

from speclab.course import screens


def test_cdn_mathjax_urls_map_onto_the_local_package(tmp_path):
    (tmp_path / "output" / "chtml" / "fonts").mkdir(parents=True)
    (tmp_path / "tex-mml-chtml.js").write_text("//")
    (tmp_path / "output" / "chtml" / "fonts" / "tex.js").write_text("//")
    assert screens.local_mathjax("https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js", tmp_path) == \
        tmp_path / "tex-mml-chtml.js"
    assert screens.local_mathjax("https://cdn.jsdelivr.net/npm/mathjax@3/es5/output/chtml/fonts/tex.js?v=1",
                                 tmp_path) == tmp_path / "output" / "chtml" / "fonts" / "tex.js"
    assert screens.local_mathjax("https://cdn.jsdelivr.net/npm/mathjax@3/es5/missing.js", tmp_path) is None


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs headless Chromium")
def test_a_line_past_a_phones_edge_is_reported_and_a_narrow_page_is_not(tmp_path, monkeypatch):
    monkeypatch.setattr(screens, "mathjax_dir", lambda: tmp_path)  # these pages load no MathJax
    html = tmp_path / "html"
    (html / "book").mkdir(parents=True)
    wide = "<p><mjx-container style='white-space: nowrap'>" + "x + " * 80 + "y</mjx-container></p>"  # maths
    for name, body in (("narrow", "<p>A short paragraph.</p><pre>code</pre>"), ("wide", wide)):
        (html / "book" / f"{name}.html").write_text(f"<html><body><main><article>{body}</article></main></body></html>")
    reports = screens.screenshots(html, tmp_path / "out", ["book/narrow", "book/wide"], widths=(400,))
    assert reports["book/narrow"][400]["prose_cut"] == 0 and reports["book/wide"][400]["prose_cut"] == 1
    assert (tmp_path / "out" / "book_wide-400.png").stat().st_size > 0
    with pytest.raises(FileNotFoundError, match="build the book first"):
        screens.screenshots(html, tmp_path / "out", ["book/absent"])
