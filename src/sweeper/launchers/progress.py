"""Progress while a sweep runs (rich): each point's window and step while its ranks run, a summary line when it
ends, and the sweep's ETA.

* **Where a point is**: the ranks publish the optimizer steps they have finished in ``rank<r>.step`` (see
  :mod:`sweeper.results.rankfile`); the driver reads them (never the ranks: it costs them nothing) on each pass of the
  local launcher's wait loop (:func:`sweeper.launchers.torchrun._run_ranks`, every :data:`POLL_S` s), and
  :func:`position` turns the slowest rank's count and the spec's windows into ``setup``, ``warm-up``, ``timed``,
  ``memory``, ``profile``, then ``writing record`` (all steps done, or the ranks gone).
* **ETA** (:class:`SweepClock`): the mean driver wall time of the points that launched ranks in this run (resumed,
  refused, pruned and duplicate points take ~0 s and are left out) times the points left.
* **Terminal** (``Console.is_terminal``): one rich :class:`~rich.status.Status` line per point, updated in place.
  **Not a terminal** (a log: CI, SLURM): plain lines, no ANSI escapes: one when a point starts, one per window it
  enters (never one per step), and the summary line when it ends.

Overrides, reasons and every other text from a user or a library are printed literally: rich markup and highlighting
are off everywhere here (docs/cases.md#t07: a gloo message starting ``[/.../pair.cc:NNN]`` was read as a markup tag and
killed the sweep); only :class:`~rich.text.Text` objects are printed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.status import Status
from rich.text import Text

from sweeper.config.spec import PointSpec
from sweeper.results.metrics import contention_lost
from sweeper.results.rankfile import read_rank_steps
from sweeper.results.record import Record
from sweeper.units import peak_text

_console = Console(stderr=False, highlight=False, markup=False, emoji=False)

#: Seconds between two reads of the step files by the local launcher's wait loop.
POLL_S = 0.5
SETUP = "setup"
WRITING = "writing record"
BATCH_SEARCH = "batch search"
#: ``timed_steps=auto`` past the warm-up: the timed window, or the memory/profile windows after its (unknown) end.
AUTO_WINDOW = "timed (auto) or after"
#: The measurement windows, in the order the ranks run them, with the :class:`PointSpec` field of each length.
WINDOWS: tuple[tuple[str, str], ...] = (
    ("warm-up", "warmup_steps"),
    ("timed", "timed_steps"),
    ("memory", "memory_steps"),
    ("profile", "profile_steps"),
)


def _label(index: int, total: int | None, overrides: list[str]) -> str:
    pos = f"[{index + 1}/{total}]" if total else f"[{index + 1}]"
    return f"{pos} {' '.join(overrides) or '(defaults)'}"


def format_duration(seconds: float) -> str:
    """``seconds`` (s) for a person: ``45 s``, ``3 min`` (rounded), ``1 h 05 min``."""
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.0f} s"
    minutes = round(s / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


@dataclass(frozen=True)
class Position:
    """Where a point's ranks are.

    Attributes:
        window: ``setup``, ``warm-up``, ``timed``, ``memory``, ``profile``, ``writing record`` or ``batch search``.
        step: the optimizer step running now, 1-based over the whole run (None outside the windows).
        total: the point's optimizer steps (``spec.total_steps``; None outside the windows); with ``timed_steps=auto``
            an upper bound (the timed window at its cap), shown as ``<=total``.
        at_most: ``total`` is an upper bound (``timed_steps=auto``).
    """

    window: str
    step: int | None = None
    total: int | None = None
    at_most: bool = False

    def text(self) -> str:
        """``timed  step 6/14``, ``timed (auto) or after  step 12/<=68``, or the window alone (``setup``)."""
        if self.step is None:
            return self.window
        return f"{self.window}  step {self.step}/{'<=' if self.at_most else ''}{self.total}"


def position(spec: PointSpec, steps: Mapping[int, int], ranks_done: bool = False) -> Position:
    """Where the ranks of ``spec`` are, from ``steps`` (rank -> optimizer steps finished, as
    :func:`sweeper.results.rankfile.read_rank_steps` returns).

    The slowest rank decides: until every one of the ``spec.world_size`` ranks has a step file the point is in
    ``setup`` (model build, Trainer set-up); with ``n`` steps finished, step ``n + 1`` runs, in the window that
    holds it (empty windows are skipped); once all ``spec.total_steps`` are done, or ``ranks_done`` (the ranks
    exited), the point is ``writing record`` (rank files, traces, the merge).
    """
    total = spec.total_steps
    if ranks_done:
        return Position(WRITING)
    if len(steps) < spec.world_size:
        return Position(SETUP)
    done = min(steps.values())
    if spec.timed_auto and done >= spec.warmup_steps and done < total:
        # the ranks end the timed window when the median is known (or at the cap); the step files do not say
        # when, so the windows after it cannot be told apart from here
        return Position(AUTO_WINDOW, done + 1, total, at_most=True)
    end = 0
    for window, length in WINDOWS:
        end += getattr(spec, length)
        if done < end:
            return Position(window, done + 1, total)
    return Position(WRITING)


def read_position(spec: PointSpec, pdir: Path, ranks_done: bool = False) -> Position:
    """:func:`position` from the step files in the point directory ``pdir`` (a scandir and one tiny read per rank;
    never raises for a missing directory)."""
    return position(spec, read_rank_steps(pdir), ranks_done)


@dataclass
class SweepClock:
    """The sweep's ETA: the wall times (s) of the points of this run that launched ranks.

    Points that did not launch (resumed from a record, refused by the gate, pruned, the same point twice) take
    ~0 s and would drag the mean down, so they are not counted.
    """

    walls_s: list[float] = field(default_factory=list)

    def point_done(self, wall_s: float, launched: bool) -> None:
        """Count one finished point: its driver wall time ``wall_s`` (s), kept only when it ``launched`` ranks."""
        if launched:
            self.walls_s.append(wall_s)

    @property
    def mean_s(self) -> float | None:
        """Mean wall time (s) of the counted points; None before the first."""
        return sum(self.walls_s) / len(self.walls_s) if self.walls_s else None

    def eta_s(self, points_after: int, running_s: float | None = None) -> float | None:
        """Seconds (estimated) until the sweep ends: the mean times ``points_after`` (points not begun yet), plus,
        while a point runs for ``running_s`` s, what the mean leaves of it (at least 0). None before any point was
        counted; 0 when nothing is left."""
        mean = self.mean_s
        if mean is None:
            return None
        rest = max(0.0, mean - running_s) if running_s is not None else 0.0
        return mean * max(0, points_after) + rest


#: This process's sweep (Hydra's basic launcher runs the points one after the other in one process).
_clock = SweepClock()


def _eta_text(eta_s: float | None) -> str | None:
    return None if eta_s is None or eta_s <= 0 else f"eta {format_duration(eta_s)}"


class PointProgress:
    """One point on the screen while it runs: its label, where its ranks are, its elapsed time (s) and the ETA.

    On a terminal a rich :class:`~rich.status.Status` (a spinner, redrawn in place; ``__rich__`` renders it);
    otherwise plain lines (:meth:`start`, then one per window entered, at most once each).
    """

    def __init__(
        self,
        index: int,
        total: int | None,
        overrides: list[str],
        console: Console,
        clock: SweepClock | None = None,
    ) -> None:
        self.label = _label(index, total, overrides)
        self.points_after = (total - index - 1) if total else None
        self.console = console
        self.clock = clock if clock is not None else SweepClock()
        self.t0 = time.monotonic()
        self.position: Position | None = None
        self.launched = False
        self._printed: set[str] = set()

    @property
    def plain(self) -> bool:
        """Plain lines (the console is not a terminal)."""
        return not self.console.is_terminal

    def elapsed_s(self) -> float:
        """Seconds since the point started."""
        return time.monotonic() - self.t0

    def eta_s(self) -> float | None:
        """The sweep's ETA (s) now, counting what the mean leaves of this point."""
        if self.points_after is None:
            return None
        return self.clock.eta_s(self.points_after, self.elapsed_s())

    def line(self) -> str:
        """The running line: ``[3/4] fsdp=full_shard gc=true  timed  step 6/14  (41 s)  eta 3 min``."""
        parts = [self.label, self.position.text() if self.position else "starting"]
        parts.append(f"({format_duration(self.elapsed_s())})")
        eta = _eta_text(self.eta_s())
        if eta:
            parts.append(eta)
        return "  ".join(parts)

    def __rich__(self) -> Text:
        return Text(self.line())

    def start(self) -> None:
        """Plain mode: the line that says the point starts (with the ETA when known)."""
        if self.plain:
            eta = _eta_text(self.eta_s())
            self._print("  ".join(p for p in (self.label, "start", eta) if p))

    def ranks_running(self, spec: PointSpec, pdir: Path, *, search: bool = False, ranks_done: bool = False) -> None:
        """Read where the ranks of ``spec`` are (step files in ``pdir``); ``search``: a batch-search trial launch
        (no step files; shown as ``batch search``); ``ranks_done``: the ranks exited. In plain mode, print a line
        when the point enters a window it has not been in."""
        self.launched = True
        pos = Position(BATCH_SEARCH) if search else read_position(spec, pdir, ranks_done)
        self.position = pos
        if self.plain and pos.window not in self._printed:
            self._printed.add(pos.window)
            self._print(f"{self.label}  {pos.text()}  ({format_duration(self.elapsed_s())})")

    def _print(self, line: str) -> None:
        self.console.print(Text(line), soft_wrap=True)


#: The point now running in this process (set by :func:`announce`), which the wait loop reports to.
_active: PointProgress | None = None


def ranks_running(spec: PointSpec, pdir: Path, *, search: bool = False, ranks_done: bool = False) -> None:
    """Tell the point shown by :func:`announce` (none: nothing happens) where its ranks are; called by the local
    launcher's wait loop every :data:`POLL_S` s and once when the ranks exit (see
    :meth:`PointProgress.ranks_running`)."""
    if _active is not None:
        _active.ranks_running(spec, pdir, search=search, ranks_done=ranks_done)


@contextmanager
def announce(
    index: int,
    total: int | None,
    overrides: list[str],
    console: Console | None = None,
    clock: SweepClock | None = None,
) -> Iterator[PointProgress]:
    """Show the point while the block runs: a rich spinner line on a terminal, plain lines otherwise (see the
    module doc). When the block ends, its wall time (s) counts towards ``clock``'s ETA (default: this process's
    sweep) if the point launched ranks."""
    global _active
    console = console or _console
    clock = clock if clock is not None else _clock
    point = PointProgress(index, total, overrides, console, clock)
    previous, _active = _active, point
    try:
        if point.plain:
            point.start()
            yield point
        else:
            with Status(point, console=console):
                yield point
    finally:
        _active = previous
        clock.point_done(point.elapsed_s(), point.launched)


def summary_line(
    index: int,
    total: int | None,
    overrides: list[str],
    record: Record,
    eta_s: float | None = None,
    elapsed_s: float | None = None,
) -> str:
    """One line: position and overrides, status, tokens/s per device and peak memory (as the report writes it:
    :func:`sweeper.units.peak_text`, MiB = 2**20 bytes) when ``ok``, and the share of the timed window lost to CPU
    contention when the point is ``contended``; else the reason; the point's time in seconds (``elapsed_s``, the
    clock of its progress lines, from the point's start in the driver; else the record's ``wall_time_s``, from
    its ranks' launch); the sweep's ETA (``eta_s``, s) when known and not 0."""
    m = record.metrics
    parts = [_label(index, total, overrides), record.status]
    if record.status == "ok":
        parts.append(f"{m.get('tokens_per_s_per_device', 0):,.0f} tokens/s/device")
        peak = m.get("peak_mem_bytes")
        if peak is not None:
            parts.append(f"peak {peak_text(peak)}")
        if m.get("contended"):  # the report's caveat, where the user reads first (docs/measurement.md "Contention")
            lost = contention_lost(m) or 0.0
            parts.append(
                f"(measured under CPU contention: {lost * 100:.0f} % of the timed window lost; tokens/s not certain)"
            )
    else:
        parts.append(record.reason or "")
    took = elapsed_s if elapsed_s is not None else record.wall_time_s
    if took is not None:
        parts.append(f"({took:.1f} s)")
    eta = _eta_text(eta_s)
    if eta:
        parts.append(eta)
    return "  ".join(parts)


def finished(
    index: int,
    total: int | None,
    overrides: list[str],
    record: Record,
    console: Console | None = None,
    clock: SweepClock | None = None,
    elapsed_s: float | None = None,
) -> None:
    """Print :func:`summary_line` literally (never as markup), with the ETA of ``clock`` (default: this process's
    sweep) for the points after this one and the point's time ``elapsed_s`` (s, the clock of its progress lines:
    :meth:`PointProgress.elapsed_s`)."""
    clock = clock if clock is not None else _clock
    eta = clock.eta_s(total - index - 1) if total else None
    line = summary_line(index, total, overrides, record, eta, elapsed_s)
    (console or _console).print(Text(line), soft_wrap=True)
