"""The built book as a reader's browser shows it: every page in headless Chromium at a desktop and a phone
width, a full-page screenshot of each, and what scrolls sideways.

    python -m speclab book screenshots --out runs/screens     # after `jupyter-book build .`

Chromium is driven through its DevTools protocol (websocket-client, which Jupyter already installs). The
book loads MathJax from a CDN; with no network the formulas would stay raw TeX, so requests for it are
answered from a copy of the `mathjax` npm package (MATHJAX_VERSION, fetched once with `npm pack` into
speclab's cache): the screenshots show formulas as a reader sees them.
"""
from __future__ import annotations

import base64
import json
import mimetypes
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import websocket  # websocket-client, which Jupyter installs

from speclab.packaged import cache_root

MATHJAX_VERSION = "3.2.2"
WIDTHS = (1400, 400)
# what a reader would have to scroll sideways to read: blocks wider than the column they sit in (code may
# scroll in its own box on a phone, as in any book; prose and maths should not run past the edge)
OVERFLOW_JS = """(() => {
  const main = document.querySelector('article') || document.querySelector('main') || document.body;
  const wider = e => e.scrollWidth > e.clientWidth + 2 || e.getBoundingClientRect().right > window.innerWidth + 2;
  const all = sel => [...main.querySelectorAll(sel)];
  // text or maths past the window's edge (inline elements have no clientWidth: their box's edge counts)
  // (a cell of a table that scrolls in its own box is counted with the tables)
  const cut = all('p, li, dd, figcaption, mjx-container')
      .filter(e => !e.closest('table') && e.getBoundingClientRect().right > window.innerWidth + 2);
  return JSON.stringify({page_scrolls: document.documentElement.scrollWidth > window.innerWidth + 2,
      code_scrolls: all('pre').filter(wider).length,       // code and printed output: scrolls in its own box
      tables_scroll: all('table').filter(wider).length,
      prose_cut: cut.length, cut_samples: cut.slice(0, 5).map(e => e.tagName.toLowerCase() + ': '
          + (e.textContent || '').replace(/\\s+/g, ' ').slice(0, 70)),
      raw_tex: (main.innerText.match(/\\\\(frac|sum|mathrm|text)\\{/g) || []).length,
      figures: all('figure').length, captions: all('figcaption').length,
      height: document.documentElement.scrollHeight});
})()"""


def mathjax_dir() -> Path:
    """The mathjax npm package's es5 folder, fetched from the registry once (`npm pack`)."""
    folder = cache_root() / f"mathjax-{MATHJAX_VERSION}"
    if not (folder / "package" / "es5").is_dir():
        if shutil.which("npm") is None:
            raise RuntimeError("screenshots need npm to fetch MathJax once (or formulas show as raw TeX): "
                               "install Node.js, or put the mathjax package in " + str(folder))
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "pack", f"mathjax@{MATHJAX_VERSION}"], cwd=folder, check=True,
                       capture_output=True)
        subprocess.run(["tar", "xzf", f"mathjax-{MATHJAX_VERSION}.tgz"], cwd=folder, check=True)
    return folder / "package" / "es5"


def local_mathjax(url: str, es5: Path) -> Path | None:
    """The local file for a CDN MathJax URL (".../mathjax@3/es5/tex-chtml.js" and the like), or None."""
    match = re.search(r"mathjax[@/][^/]*/(?:es5/)?(.+?)(?:\?.*)?$", url)
    path = es5 / match.group(1) if match else None
    return path if path is not None and path.is_file() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def chromium(binary: str = "chromium"):
    """A headless Chromium; yields the DevTools websocket URL of its first page."""
    port, profile = free_port(), tempfile.mkdtemp(prefix="speclab-chromium-")
    # --remote-allow-origins: Chromium 111 and later refuse a DevTools websocket from another origin (the
    # client's own localhost port) without it; the background-networking flags keep it off a closed network
    proc = subprocess.Popen([binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                             f"--remote-debugging-port={port}", f"--remote-allow-origins=http://127.0.0.1:{port}",
                             "--disable-background-networking", "--disable-component-update", "--no-first-run",
                             f"--user-data-dir={profile}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=1))
                yield next(p["webSocketDebuggerUrl"] for p in pages if p["type"] == "page")
                break
            except (OSError, StopIteration):
                time.sleep(0.2)
        else:
            raise RuntimeError(f"{binary} did not open its DevTools port")
    finally:
        proc.kill()
        shutil.rmtree(profile, ignore_errors=True)


class Page:
    """One Chromium tab over the DevTools protocol: commands, and MathJax served from disk."""

    def __init__(self, ws_url: str, es5: Path):
        self.ws, self.es5, self.next_id = websocket.create_connection(ws_url, timeout=60), es5, 0
        self.call("Page.enable")
        self.call("Fetch.enable", patterns=[{"urlPattern": "*mathjax*"}])

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.event(message)

    def event(self, message: dict) -> None:
        if message.get("method") != "Fetch.requestPaused":
            return
        request, params = message["params"]["requestId"], message["params"]
        path = local_mathjax(params["request"]["url"], self.es5)
        if path is None:
            self.send("Fetch.failRequest", requestId=request, errorReason="Failed")
            return
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        self.send("Fetch.fulfillRequest", requestId=request, responseCode=200,
                  responseHeaders=[{"name": "Content-Type", "value": kind},
                                   {"name": "Access-Control-Allow-Origin", "value": "*"}],
                  body=base64.b64encode(path.read_bytes()).decode())

    def send(self, method: str, **params) -> None:  # a reply to an event: its own answer is not awaited
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        return result.get("result", {}).get("value")

    def shoot(self, url: str, width: int, out: Path) -> dict:
        """Load url at width, wait for MathJax, save a full-page PNG; what scrolls sideways."""
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=900, deviceScaleFactor=1,
                  mobile=width < 600)
        self.call("Page.navigate", url=url)
        deadline = time.time() + 60
        while self.evaluate("document.readyState") != "complete" and time.time() < deadline:
            time.sleep(0.2)
        self.evaluate("window.MathJax && MathJax.startup ? MathJax.startup.promise.then(() => 1) : 1")
        report = json.loads(self.evaluate(OVERFLOW_JS))
        # the window made as tall as the page, so the capture resizes nothing (captureBeyondViewport does, and
        # the theme's layout shifts sideways while it does)
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=report["height"], deviceScaleFactor=1,
                  mobile=width < 600)
        self.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        shot = self.call("Page.captureScreenshot", format="png")
        out.write_bytes(base64.b64decode(shot["data"]))
        return report


def screenshots(html: Path, out: Path, pages: list[str], widths: tuple[int, ...] = WIDTHS,
                binary: str = "chromium") -> dict:
    """{page: {width: report}} for each page (an html file's stem under `html`), PNGs in out/."""
    missing = [p for p in pages if not (html / f"{p}.html").is_file()]
    if missing:
        raise FileNotFoundError(f"{html} has no {missing[0]}.html: build the book first (jupyter-book build .)")
    out.mkdir(parents=True, exist_ok=True)
    reports: dict = {}
    with chromium(binary) as ws_url:
        page = Page(ws_url, mathjax_dir())
        for name in pages:
            for width in widths:
                png = out / f"{name.replace('/', '_')}-{width}.png"
                reports.setdefault(name, {})[width] = page.shoot((html / f"{name}.html").resolve().as_uri(),
                                                                 width, png)
    (out / "screens.json").write_text(json.dumps(reports, indent=1) + "\n")
    return reports
