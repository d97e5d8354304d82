"""Rendering the report's :class:`~sweeper.report.blocks.Document`: Markdown text, and HTML made from that
Markdown by markdown-it-py (CommonMark with GFM tables; raw HTML disabled, no linkify, no typographer), so a
``<script>`` in a failure reason is text in report.html exactly as it is text in report.md.

The only HTML written here, rather than made from Markdown, is the page frame (head, style), the ``<details>``
wrapper of folded blocks (its summary HTML-escaped) and the plot ``<div>`` that :mod:`sweeper.report.plot_html` makes.
"""

from __future__ import annotations

import functools
import html

from markdown_it import MarkdownIt

from sweeper.report import md
from sweeper.report.blocks import Block, Bullets, Code, Document, Fold, Para, Plot, Table

_PLOT_NOTE = "Plot: `frontier.png` (static) and `report.html` (interactive), next to this file."
_PLOT_NOTE_NO_PNG = "Plot: `report.html` (interactive), next to this file (no `frontier.png`: fewer than 2 ok points)."
_PLOT_NOTE_NONE = "No plot: a single point has nothing to be compared with (its numbers are in the table below)."
_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px}"
    "table{border-collapse:collapse;font-size:0.9em;display:block;max-width:100%;overflow-x:auto}"
    "td,th{padding:3px 8px;border-bottom:1px solid #ddd;vertical-align:top;overflow-wrap:break-word}"
    "pre{background:#f5f5f5;padding:1em;overflow-x:auto}code{background:#f5f5f5}"
    "details{margin:1em 0}summary{cursor:pointer;font-weight:600}"
)


def block_markdown(block: Block) -> str:
    """One block as Markdown (a :class:`Plot` is a sentence naming the plot files; a :class:`Fold` is a ``###``
    heading followed by its blocks)."""
    if isinstance(block, Para):
        return block.markdown
    if isinstance(block, Bullets):
        return "\n".join(f"- {x}" for x in block.items)
    if isinstance(block, Table):
        return md.table(block.frame)
    if isinstance(block, Code):
        return md.fence(block.text, block.info)
    if isinstance(block, Plot):
        if block.note is not None:
            return block.note
        if not block.interactive:
            return _PLOT_NOTE_NONE
        return _PLOT_NOTE if block.png else _PLOT_NOTE_NO_PNG
    if isinstance(block, Fold):
        return "\n\n".join([f"### {md.escape(block.summary)}", *map(block_markdown, block.blocks)])
    raise TypeError(f"not a report block: {block!r}")


def render_markdown(doc: Document) -> str:
    """The report as Markdown (report.md)."""
    out = [f"# {md.escape(doc.title)}"]
    for section in doc.sections:
        if section.title:
            out.append(f"## {md.escape(section.title)}")
        out += [block_markdown(b) for b in section.blocks]
    return "\n\n".join(out) + "\n"


@functools.cache
def _markdown_it() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table")


def markdown_to_html(text: str) -> str:
    """``text`` (Markdown) as an HTML fragment; raw HTML in it is shown as text."""
    return _markdown_it().render(text)


def _block_html(block: Block, plot_div: str) -> str:
    if isinstance(block, Plot) and block.interactive:
        return plot_div
    if isinstance(block, Fold):
        inner = "".join(_block_html(b, plot_div) for b in block.blocks)
        return f"<details>\n<summary>{html.escape(block.summary)}</summary>\n{inner}</details>\n"
    return markdown_to_html(block_markdown(block))


def render_html(doc: Document, plot_div: str) -> str:
    """The report as a self-contained HTML page (report.html): every block made from its Markdown, the plot
    ``plot_div`` (trusted HTML from :func:`sweeper.report.plot_html.plot_html`; unused, may be empty, when the
    :class:`Plot` block is not ``interactive``) where the :class:`Plot` block is,
    :class:`Fold` blocks in ``<details>``."""
    out = [markdown_to_html(f"# {md.escape(doc.title)}")]
    for section in doc.sections:
        if section.title:
            out.append(markdown_to_html(f"## {md.escape(section.title)}"))
        out += [_block_html(b, plot_div) for b in section.blocks]
    return (
        f'<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8">\n<title>{html.escape(doc.title)}</title>\n'
        f"<style>{_STYLE}</style>\n</head>\n<body>\n" + "".join(out) + "</body>\n</html>\n"
    )
