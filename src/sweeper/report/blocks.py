"""The blocks of the report's structure (:class:`Document`, its :class:`Section` s and their blocks), which
:mod:`sweeper.report.document` builds and :mod:`sweeper.report.render` renders to Markdown and HTML, and when the
plots are drawn.

Text blocks (:class:`Para`, :class:`Bullets`) hold Markdown in which every piece of outside text went through
:mod:`sweeper.report.md`; :class:`Table` and :class:`Code` hold plain text that the renderer escapes or fences;
:class:`Fold` holds secondary content (a details table) that report.html shows folded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


@dataclass(frozen=True)
class Para:
    """A paragraph of Markdown (outside text already escaped)."""

    markdown: str


@dataclass(frozen=True)
class Bullets:
    """A bullet list; each item Markdown on one line (outside text already escaped)."""

    items: list[str]


@dataclass(frozen=True)
class Table:
    """A table of display strings (plain text: escaped when rendered)."""

    frame: pd.DataFrame


@dataclass(frozen=True)
class Code:
    """Plain text shown verbatim in a code block (shell commands)."""

    text: str
    info: str = "sh"


@dataclass(frozen=True)
class Plot:
    """Where the throughput vs peak-memory plot goes.

    Attributes:
        png: whether ``frontier.png`` is drawn too (at least :data:`PNG_MIN_OK` ok points: a lone point has no
            frontier to draw, and matplotlib costs it about a second).
        interactive: whether report.html has the interactive plot (:func:`interactive_plot`: at least
            :data:`PLOT_MIN_POINTS` points, one with a result: a single point has nothing to be compared with, and
            building the plotly figure costs it about half a second, ``benchmarks/harness_overhead.py``).
        note: the Markdown sentence naming the plot files, when not the single-sweep report's (the comparison page).
    """

    png: bool = True
    interactive: bool = True
    note: str | None = None


#: The fewest ok points for which ``frontier.png`` is drawn.
PNG_MIN_OK = 2
#: The fewest points (any status) for which report.html has the interactive plot.
PLOT_MIN_POINTS = 2


def interactive_plot(df: pd.DataFrame) -> bool:
    """Whether report.html has the interactive plot: at least :data:`PLOT_MIN_POINTS` points, one of them with a
    result (a sweep whose points are all ``pending`` would draw only a column of markers at the right edge)."""
    return len(df) >= PLOT_MIN_POINTS and bool((df["status"] != "pending").any())


@dataclass(frozen=True)
class Fold:
    """Secondary content under a plain-text summary: a ``###`` heading in report.md, folded in report.html."""

    summary: str
    blocks: list[Block]


Block = Para | Bullets | Table | Code | Plot | Fold


@dataclass
class Section:
    """A ``##`` section (plain-text title; the first section has none)."""

    title: str
    blocks: list[Block] = field(default_factory=list)


@dataclass
class Document:
    """The whole report: a plain-text title and its sections."""

    title: str
    sections: list[Section]
