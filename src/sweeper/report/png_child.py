"""frontier.png drawn in a child process, beside the rest of a big report (:func:`sweeper.report.build.build_report`).

For a sweep of :data:`CHILD_MIN_POINTS` points or more, drawing ``frontier.png`` (importing matplotlib, about
0.25 s, and drawing thousands of markers) is a fifth of the report's time on one core. The report starts
``python -m sweeper.report.png_child <frontier.png>`` first thing: the child imports pandas and matplotlib while the
parent reads the records, then reads the :class:`sweeper.report.plot_data.PlotData` the parent pickles to its
stdin once the table is built, and writes the PNG atomically (:func:`sweeper.report.plot_png.plot_png`) while the
parent writes the tables, the HTML and the Markdown. Measured in ``benchmarks/README.md``
(``slurm_submit_collect.py --collection-only``).

Whatever goes wrong with the child (it cannot start, exits non-zero, takes over :data:`TIMEOUT_S`), the parent draws
the PNG itself (:meth:`PngChild.finish` says so and returns False): the report is the same either way.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

#: From this many point folders on, the report draws frontier.png in a child process.
CHILD_MIN_POINTS = 1000
#: Seconds the parent waits for the child's PNG before drawing it itself.
TIMEOUT_S = 120.0


class PngChild:
    """A child process that will draw ``frontier.png`` (see the module doc)."""

    def __init__(self, proc: subprocess.Popen[bytes] | None) -> None:
        self._proc = proc
        self._sent = False

    @classmethod
    def start(cls, png: Path) -> PngChild:
        """Start the child for ``png`` (it imports its libraries and waits for the data). Never raises: a child that
        cannot start is one that :meth:`finish` reports as not drawn."""
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "sweeper.report.png_child", str(png)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # a failure is drawn again, and raised, by the parent
            )
        except OSError:
            proc = None
        return cls(proc)

    def send(self, data: Any) -> None:
        """Give the child the plot data to draw (pickled to its stdin, which is then closed). Never raises."""
        if self._proc is None or self._proc.stdin is None:
            return
        try:
            pickle.dump(data, self._proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self._proc.stdin.close()
            self._sent = True
        except (OSError, pickle.PicklingError):
            self.cancel()

    def cancel(self) -> None:
        """Stop the child without a PNG (nothing to draw, or the parent draws it)."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def finish(self) -> bool:
        """Wait for the child (at most :data:`TIMEOUT_S`): True when it wrote the PNG, False otherwise (the caller
        then draws it)."""
        if self._proc is None or not self._sent:
            self.cancel()
            return False
        try:
            self._proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.cancel()
            return False
        ok = self._proc.returncode == 0
        self._proc = None
        return ok


def main(argv: list[str] | None = None) -> int:
    """The child: ``png_child <frontier.png>``; the pickled ``PlotData`` on stdin. Exit 0 once the PNG is written."""
    import matplotlib.figure  # noqa: F401 - imported while the parent reads the records
    import pandas  # noqa: F401 - the plot data's frames

    from sweeper.report.plot_png import plot_png
    from sweeper.results.atomic import write_atomic

    (out,) = sys.argv[1:] if argv is None else argv
    data = pickle.load(sys.stdin.buffer)  # from the parent report process only (stdin is its pipe)
    write_atomic(Path(out), lambda p: plot_png(data, p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
