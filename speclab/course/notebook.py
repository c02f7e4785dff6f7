"""What the course's notebooks share besides the teaching: which machine produced a timing, numbers
glued into the book's prose, captioned figures (`figure`) and wide tables, the book's records read, a
decode trace drawn token by token (round by round, or as running text coloured by who produced each
token), and token trees drawn.

    from speclab.course.notebook import figure, glue, html_table, machine, read_record
"""
from __future__ import annotations

import html
import json
from pathlib import Path
import platform
import urllib.request

from IPython.display import HTML, display
import matplotlib.pyplot as plt
import torch
import transformers

import speclab
from speclab.methods import current_row
from speclab.packaged import cache_root
from speclab.devices import cpu_name  # noqa: F401  (the machine line names the CPU; kept importable here)
from speclab.stats import Round
from speclab.trees import children


def glue(name: str, value, display: bool = True) -> None:
    """myst-nb's glue where the book is built (a measured number appears in the prose); elsewhere
    (Colab, plain Jupyter) it does nothing. It returns None, so that a cell ending in ``glue(...)``
    shows no raw number under it."""
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        return None
    myst_glue(name, value, display=display)
    return None


def figure(name: str, fig) -> None:
    """Show a matplotlib figure under its cell and glue it as `name` for a ``{glue:figure}`` caption in the
    book; the figure is closed so that the inline backend does not draw it twice. In Jupyter or Colab it
    shows under its cell as usual. Draw it in a cell tagged `remove-output` (and `hide-input` when its code
    is plumbing) ending in `figure("fig-name", fig)`; the prose shows it numbered and captioned with

        ```{glue:figure} fig-name
        :name: fig-name
        :alt: what the figure shows, in words

        Caption: what to see in it.
        ```
    and refers to it as {numref}`fig-name`."""

    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        display(fig)
    else:
        myst_glue(name, fig, display=True)
    plt.close(fig)


RECORDS = Path(__file__).resolve().parents[2] / "book" / "records"
# Where a chapter finds a record when pip installed only the package (Colab): the repository's, fetched once.
# _config.yml's repository.url names the same repository (tests/course/test_book.py keeps them one).
REPOSITORY = "speclab-course/speclab"
RAW_RECORDS = f"https://raw.githubusercontent.com/{REPOSITORY}/main/book/records/"


def read_record(name: str) -> dict:
    """A record of the book (`book/records/NAME.json`, "NAME" or "NAME.json"): what a command measured on a named
    host, read back. A path with a folder in it is read as it is. Where the package was pip-installed without
    the repository (Colab), the record is fetched from the repository once and kept in speclab's cache."""
    given = Path(name)
    if given.parent != Path("."):
        path = given
    else:
        path = RECORDS / given.with_suffix(".json").name
        if not path.exists():   # a chapter run from book/ in a checkout without the package's tree beside it
            path = Path("records") / path.name
        if not path.exists():
            path = fetched_record(path.name)
    if not path.exists():
        raise FileNotFoundError(f"no record {name!r}: expected book/records/{given.stem}.json in the repository")
    return current_rows(json.loads(path.read_text()))


def fetched_record(file: str) -> Path:
    """book/records/`file` from the repository's main branch (RAW_RECORDS), kept under speclab's cache folder
    until deleted: what a chapter reads on Colab (a fresh runtime, a fresh cache), where `pip install` brings
    the package but not the book's records."""
    kept = cache_root() / "records" / file
    if kept.exists():
        return kept
    url = RAW_RECORDS + file
    try:
        data = download(url)
        json.loads(data)   # a proxy's error page is not a record
    except Exception as err:  # noqa: BLE001 (any failure says the same thing to the reader)
        raise FileNotFoundError(
            f"no record {file}: it is not beside this installed speclab (pip installs the package, not the book's "
            f"records) and fetching {url} failed ({type(err).__name__}: {err}). Run the chapter from a clone of "
            f"https://github.com/{REPOSITORY}, or put the file in {kept.parent}.") from err
    kept.parent.mkdir(parents=True, exist_ok=True)
    partial = kept.with_suffix(".part")
    partial.write_bytes(data)
    partial.replace(kept)   # whole or absent
    return kept


def download(url: str) -> bytes:
    """The bytes at `url` (a function of its own so that the tests can stand in for the network)."""
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read()


def current_rows(record):
    """`record` with each bench row's label (a "method" anywhere in it) as the row is named now: a record
    written under an older label ("speclab speculative") reads under the registry's ("speclab draft_model",
    speclab.methods.current_row); every other value as it was."""
    if isinstance(record, list):
        return [current_rows(value) for value in record]
    if not isinstance(record, dict):
        return record
    out = {key: current_rows(value) for key, value in record.items()}
    if isinstance(out.get("method"), str):
        out["method"] = current_row(out["method"])
    return out


def html_table(rows: list[list], header: list[str], caption: str | None = None, align: str | None = None):
    """A table as HTML (IPython.display.HTML), for tables too wide for printed text: one cell per value,
    numbers right-aligned (or `align`, one of 'l'/'r' per column)."""

    def cell(value, i: int, tag: str = "td") -> str:
        right = (align[i] == "r") if align else isinstance(value, (int, float))
        style = ("text-align:right" if right else "text-align:left") + ";padding:0.2em 0.6em"
        return f"<{tag} style='{style}'>{html.escape(str(value))}</{tag}>"

    head = "".join(cell(h, i, "th") for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(cell(v, i) for i, v in enumerate(row)) + "</tr>" for row in rows)
    top = f"<caption style='caption-side:top;text-align:left'>{html.escape(caption)}</caption>" if caption else ""
    return HTML(f"<table class='speclab-table'>{top}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def precision(target: torch.nn.Module, draft: torch.nn.Module | None = None) -> str:
    """What the timings' precision is: 'torch.float32', or 'torch.float32 target, torch.float16 draft'
    when the two differ (on a CPU the draft runs in half precision, see devices.draft_dtype)."""
    if draft is None or draft.dtype == target.dtype:
        return str(target.dtype)
    return f"{target.dtype} target, {draft.dtype} draft"


MACHINE_WIDTH = 72  # characters per line of the machine line: it fits the book's output box with a prefix


def machine(device: torch.device | str, dtype: torch.dtype | str | None = None, width: int = MACHINE_WIDTH) -> str:
    """What a timing depends on: CPU, torch threads, torch version, device (and GPU), dtype. One line
    when it fits in `width` characters, otherwise broken after a comma, continuation lines indented."""
    device = torch.device(device)
    threads = torch.get_num_threads()
    parts = [cpu_name(), f"{threads} thread{'' if threads == 1 else 's'}", f"torch {torch.__version__}",
             f"device {device}"]
    if device.type == "cuda":
        parts.append(f"GPU {torch.cuda.get_device_name(device)}")
    if dtype is not None:
        parts.append("dtype " + str(dtype).replace("torch.", ""))
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 2 + len(part) <= width:
            lines[-1] += ", " + part
        else:
            lines[-1] += ","
            lines.append("  " + part)
    return "\n".join(lines)


def environment_report(device: torch.device | str, dtype: torch.dtype | str | None = None) -> dict:
    """Python, library versions, device, threads and GPU memory: the facts a reader compares timings by."""
    device = torch.device(device)
    report = {"python": platform.python_version(), "platform": platform.platform(), "torch": torch.__version__,
              "transformers": transformers.__version__, "speclab": speclab.__version__, "device": str(device),
              "dtype": str(dtype), "torch threads": torch.get_num_threads(), "cpu": cpu_name()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        report.update({"gpu": props.name, "gpu memory (GiB)": round(props.total_memory / 2**30, 1),
                       "cuda": torch.version.cuda})
    return report


# ---------------------------------------------------------------- a decode trace, token by token
COLOURS = {"accepted": "#b7e4b0", "rejected": "#f4a6a6", "discarded": "#dddddd",
           "correction": "#a9c8f0", "bonus": "#f5d76e"}


def round_kinds(r: Round) -> list[tuple[int, str]]:
    """(token id, kind) for every token of one round: accepted drafts, the rejected one, the drafts
    discarded after it, then the target's own token (a correction, or the bonus when all passed)."""
    kinds = [(t, "accepted") for t in r.drafted[:r.accepted]]
    if r.accepted < len(r.drafted):
        kinds.append((r.drafted[r.accepted], "rejected"))
        kinds += [(t, "discarded") for t in r.drafted[r.accepted + 1:]]
    bonus = bool(r.drafted) and r.accepted == len(r.drafted)
    return kinds + [(r.next_token, "bonus" if bonus else "correction")]


def token_span(text: str, kind: str, token_id: int) -> str:
    shown = text.replace("\n", "⏎") or "∅"
    strike = "text-decoration:line-through;" if kind in ("rejected", "discarded") else ""
    return (f'<span title="{kind} (id {token_id})" style="background:{COLOURS[kind]};{strike}'
            f'white-space:pre;font-family:monospace;padding:1px 2px;margin:1px;border-radius:3px">'
            f'{html.escape(shown)}</span>')


def trace_html(trace: list[Round], tokenizer) -> str:
    """An HTML table of a speculative run's rounds (GenerationResult.trace), each token coloured by
    what happened to it; display it with IPython.display.HTML."""
    legend = " ".join(f'<span style="background:{c};padding:1px 4px;border-radius:3px">{k}</span>'
                      for k, c in COLOURS.items())
    rows = "".join(
        f"<tr><td style='text-align:right'>{i + 1}</td><td style='text-align:center'>{r.accepted}/{len(r.drafted)}</td>"
        f"<td style='text-align:left'>"
        f"{''.join(token_span(tokenizer.decode([t]), kind, t) for t, kind in round_kinds(r))}</td></tr>"
        for i, r in enumerate(trace))
    return (f"<div>{legend}</div><table><tr><th>round</th><th>accepted</th>"
            f"<th style='text-align:left'>drafts, then the target's token</th></tr>{rows}</table>")


WHO = {"lookup": "#f5d76e", "drafter": "#b7e4b0", "target": "#eeeeee"}  # output_html's colours


def output_html(trace: list[Round], tokenizer, sources: list[str] | None = None) -> str:
    """A speculative run's output as running text, each token coloured by who produced it: an accepted
    draft (by `sources[i]`, "lookup" or "drafter", for the i-th round that drafted; all "drafter"
    without sources) or the target itself (its correction or bonus token)."""
    spans, drafted_rounds = [], iter(sources or [])
    for r in trace:
        who = next(drafted_rounds, "drafter") if r.drafted else "target"
        kept = r.new_tokens
        for i, t in enumerate(kept):
            kind = who if i < len(kept) - 1 else "target"
            text = html.escape(tokenizer.decode([t])).replace("\n", "&#8629;<br>")
            spans.append(f'<span title="{kind}" style="background:{WHO[kind]};white-space:pre-wrap">{text}</span>')
    legend = " ".join(f'<span style="background:{c};padding:1px 4px">{k}</span>' for k, c in WHO.items())
    return f"<div>{legend}</div><div style='font-family:monospace;line-height:1.6'>{''.join(spans)}</div>"


def tree_layout(parents: list[int]) -> tuple[dict[int, float], dict[int, float]]:
    """x, y of the root (-1) and every node of a token tree (speclab.trees): leaves spread evenly,
    parents above the middle of their children (drawing only)."""
    kids = children(parents)
    x: dict[int, float] = {}
    y: dict[int, float] = {}
    next_leaf = [0]

    def place(node: int, depth: int) -> None:
        y[node] = -depth
        if not kids[node + 1]:
            x[node] = next_leaf[0]
            next_leaf[0] += 1
            return
        for child in kids[node + 1]:
            place(child, depth + 1)
        x[node] = sum(x[c] for c in kids[node + 1]) / len(kids[node + 1])

    place(-1, 0)
    return x, y


def draw_tree(ax, parents: list[int], labels: list[str], title: str, size: float = 300, fontsize: float = 7,
              colors: list[str] | None = None, root: str = "root") -> None:
    """Draw a token tree on matplotlib axes `ax`: one circle per node labelled `labels[i]` (filled
    with colors[i] when given), the root on top labelled `root`."""
    x, y = tree_layout(parents)
    for i, p in enumerate(parents):
        ax.plot([x[p], x[i]], [y[p], y[i]], "k-", lw=0.8, zorder=1)
    nodes = [-1] + list(range(len(parents)))
    fill = ["white"] + (list(colors) if colors is not None else ["white"] * len(parents))
    ax.scatter([x[n] for n in nodes], [y[n] for n in nodes], s=size, c=fill, edgecolors="k", zorder=2)
    for n, label in zip(nodes, [root] + list(labels)):
        ax.text(x[n], y[n], label, ha="center", va="center", fontsize=fontsize, zorder=3)
    ax.margins(0.08)
    ax.set_title(title, fontsize=9)
    ax.axis("off")
