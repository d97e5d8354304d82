"""Why this process's sweep is incomplete, one line per cause: a point not recorded or the report not written (a
full disk), a submission SLURM refused. Non-empty makes ``python -m sweeper`` exit 3 (``docs/failures.md``); every
layer that meets such a cause adds its line here (the launchers sit below the entry point)."""

from __future__ import annotations

#: The lines, in the order they were met.
incomplete: list[str] = []
