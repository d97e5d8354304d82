"""The report of a sweep: ``python -m sweeper.report <sweep_dir>`` (re)builds, inside the sweep directory,

- ``results.csv`` and ``results.parquet``: one row per point, the columns of :mod:`sweeper.results.row` (every
  swept key, units in the names, ``schema_version``);
- ``report.md``: pasteable Markdown (environment, grid, results with the Pareto frontier marked, failures, replay
  commands, how each number was measured);
- ``report.html``: a self-contained page made from that Markdown, with an interactive throughput vs peak-memory
  plot;
- ``frontier.png``: the same plot as a static image.

Modules, one job each: :mod:`~sweeper.report.build` (the files), :mod:`~sweeper.report.document` (the content as a
structure, of :mod:`~sweeper.report.blocks`), :mod:`~sweeper.report.tables` (results, pending and failures tables),
:mod:`~sweeper.report.axes` (the swept axes), :mod:`~sweeper.report.notes` (how each number was measured),
:mod:`~sweeper.report.render` (Markdown, and HTML from it), :mod:`~sweeper.report.md` (escaping outside text),
:mod:`~sweeper.report.fmt` (values for people), :mod:`~sweeper.report.plot_data` (what the plot shows; drawn by
``plot_html``, plotly, and ``plot_png``, matplotlib), :mod:`~sweeper.results.frontier` (the Pareto frontier),
:mod:`~sweeper.report.cli` (the command).

Memory is shown in one unit per report: GiB (2**30 bytes) when the largest recorded peak memory is at least 1 GiB,
else MiB (2**20 bytes); booleans are spelled ``true``/``false`` as on the command line. Each table of report.md and
report.html shows at most ``max_rows`` rows (200 by default, every frontier point always), with a note saying how
many were left out; the CSV and Parquet files hold every point. Text from libraries and users (failure reasons,
overrides) is never markup: it shows literally in report.md and report.html.

This package imports neither torch nor transformers; matplotlib and plotly are imported only inside the functions
that draw.

Floor (``docs/architecture.md``, the layers): ``report``, below ``hydra_callbacks`` (which builds it at the end of a
sweep) and above ``launchers | tracking | search``.
"""

from sweeper.report.build import build_report
from sweeper.report.cli import main

__all__ = ["build_report", "main"]
