"""The W&B comparison report of a sweep: ``python -m sweeper.wandb_report <sweep_dir> [--publish]``.

Writes ``<sweep_dir>/wandb_report.json`` (the report's specification, and how to publish it) from the records on
disk; with ``--publish`` (needs a W&B login) also saves the report to W&B through the ``wandb-workspaces`` reports
API and prints its URL. Modules: :mod:`~sweeper.wandb_report.spec` (what the report shows; the builder),
:mod:`~sweeper.wandb_report.cli` (the command).

``wandb`` and ``wandb_workspaces`` (the ``tracking`` extra) are imported only inside functions: importing this
package needs neither.

Floor (``docs/architecture.md``, the layers): the apps, ``__main__ | plan | wandb_report | status``, the top floor.
"""

from sweeper.wandb_report.cli import main

__all__ = ["main"]
