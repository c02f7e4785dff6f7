"""Section 9.6's helpers: a chat record's speeds by category as a figure, one marker per method, and a
live run's output coloured by who drafted it, each called in one line from the page (chapter 9's other
helpers are in ch09).

    from speclab.course.chapters import ch09, ch09_compare
    speeds = ch09.by_category(ch09.bench_rows("smollm2_lookup_first.json"))
    figure("fig-09-lookup-first", ch09_compare.category_figure(speeds, {"speclab eagle3": "EAGLE-3"}))
"""
from __future__ import annotations

import html

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import HTML
from matplotlib.figure import Figure

from speclab.course.notebook import output_html
from speclab.methods import current_row

WIDTH = 7.5    # inches: the book's 780-pixel column
FONT = 9       # points: the smallest text a figure uses
MARKS = "osD^v<>"


def categories_of(speeds: dict[tuple[str, str], tuple]) -> list[str]:
    """The categories of a by_category dict, in the record's order."""
    return list(dict.fromkeys(c for _, c in speeds))


def category_figure(speeds: dict[tuple[str, str], tuple], labels: dict[str, str],
                    xlabel: str = "speed vs target-only") -> Figure:
    """One row per category (the record's order, top down), one marker per labelled method at its
    speed over target-only (the first element of each value of `speeds`, as ch09.by_category returns
    it), and a line at 1: where a method sits left of the line, it lost to the target alone."""
    labels = {current_row(m): label for m, label in labels.items()}  # an older label names the row too
    if len(labels) > len(MARKS):
        raise ValueError(f"at most {len(MARKS)} methods a figure, got {len(labels)}")
    cats = categories_of(speeds)
    missing = [(m, c) for m in labels for c in cats if (m, c) not in speeds]
    if missing:
        raise KeyError(f"no speed for {missing[:3]}")
    fig, ax = plt.subplots(figsize=(WIDTH, 0.42 * len(cats) + 1.2))
    y = np.arange(len(cats))[::-1]
    offsets = np.linspace(0.25, -0.25, len(labels)) if len(labels) > 1 else [0.0]   # first on top
    for (m, label), dy, mark in zip(labels.items(), offsets, MARKS):
        ax.plot([speeds[m, c][0] for c in cats], y + dy, mark, ms=5, label=label, ls="none")
    ax.axvline(1, color="k", lw=0.8)
    ax.set_yticks(y, cats, fontsize=FONT)
    ax.set_xlabel(xlabel, fontsize=FONT)
    ax.tick_params(labelsize=FONT)
    ax.grid(axis="x", lw=0.3)
    ax.legend(fontsize=FONT, ncol=len(labels), loc="lower center", bbox_to_anchor=(0.5, 1.0),
              frameon=False)
    fig.tight_layout()
    return fig


def sources_of(drafter) -> list[str] | None:
    """Who drafted each round that drafted, for a drafter that records it (lookup_first's "lookup" or
    "drafter" for its first sequence), else None."""
    return getattr(drafter, "sources", {}).get(0)


def run_html(name: str, result, tokenizer, sources: list[str] | None = None):
    """One speculative run as HTML: a caption (tokens a round, rounds, how many lookup drafted) over its
    output, each token coloured by who produced it (speclab.course.notebook.output_html)."""
    st = result.stats
    caption = f"<b>{html.escape(name)}</b>: {st.mean_tokens_per_round:.2f} tokens a round over {st.rounds} rounds"
    if sources:
        caption += f"; lookup drafted {sources.count('lookup')} of the {len(sources)}"
    return HTML(f"<p>{caption}</p>" + output_html(result.trace, tokenizer, sources))
