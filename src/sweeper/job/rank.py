"""The life every rank shares, whatever it runs: a measured point (:func:`sweeper.job.harness.run_rank`) or the
trials of a batch search (:func:`sweeper.job.batch_trials.run_search`).

One entry point starts every rank, ``python -m sweeper.job.harness [--mode=search] <point_dir>`` (torchrun; on
SLURM, :mod:`sweeper.launchers.slurm.in_job` calls the measured mode itself); :func:`main` is its common part:

1. **orphan guard**: under sweeper's local torchrun the rank dies with torchrun (``PR_SET_PDEATHSIG``: torchrun dies
   with the driver, so a SIGKILLed driver leaves no rank behind), and one whose torchrun is already gone stops at
   once (exit 1; :mod:`sweeper.job.orphan`);
2. **setup**: :class:`Rank` reads ``<point_dir>/spec.json`` and who this rank is (``RANK``, ``WORLD_SIZE``), and
   whether it runs on CUDA; the reads of what the driver wrote for the rank (:meth:`Rank.read_input`) are the
   attributed site ``rank-spec`` (:mod:`sweeper.job.faults`): a fault there is the rank's failure, in its rank file;
3. **the mode's work**, through :meth:`Rank.attempt`: any exception is a result, kept as the rank's failure (the raw
   exception: type, message, traceback, phase, step; :class:`sweeper.results.rankfile.RankFailure`), never decided
   on here: the driver classifies it;
4. **the rank file** (:meth:`Rank.write`): ``rank<r>.json`` (:class:`sweeper.results.rankfile.RankFile`), written
   atomically; then :func:`exit_now` skips the interpreter's teardown.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from transformers import TrainerCallback

from sweeper.config.spec import PointSpec
from sweeper.results.rankfile import MESSAGE_CHARS, TRACEBACK_CHARS, RankFailure, RankFile, write_rank_file
from sweeper.results.sweepdir import SPEC_FILE

T = TypeVar("T")
#: A mode: runs this rank's part of the point in ``point_dir`` and returns the rank's exit code.
Mode = Callable[[Path], int]


class PhaseTracker(TrainerCallback):
    """Knows the phase (setup / train / eval) and the current optimizer step, for failure records."""

    def __init__(self) -> None:
        self.phase = "setup"
        self.step: int | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.phase = "train"

    def on_step_begin(self, args, state, control, **kwargs):
        self.step = state.global_step


class Rank:
    """One rank of a point: who it is, what it runs, and how it ended (its rank file).

    Attributes:
        point_dir: the point directory.
        spec: the point spec as ``spec.json`` has it (``per_device_batch_size=auto`` not yet resolved).
        rank, world_size: this rank's global rank and the number of ranks (``RANK``, ``WORLD_SIZE``; 0 and 1 when
            unset).
        use_cuda: the spec does not ask for the CPU and torch sees a GPU.
        failure: the first failure :meth:`attempt` kept, None while there is none.

    Construction never raises: a ``spec.json`` that cannot be read is the rank's failure at the site ``rank-spec``
    (:attr:`ok` is then False; :meth:`write_unmeasured` writes the rank file that says so).
    """

    def __init__(self, point_dir: Path) -> None:
        import torch

        self.point_dir = Path(point_dir)
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.failure: RankFailure | None = None
        self._spec = self.read_input(lambda: PointSpec.from_dict(json.loads((self.point_dir / SPEC_FILE).read_text())))
        self.use_cuda = self._spec is not None and self._spec.device != "cpu" and torch.cuda.is_available()

    @property
    def spec(self) -> PointSpec:
        """The point spec of ``spec.json``.

        Raises:
            RuntimeError: it could not be read (:attr:`failure` says why; check :attr:`ok` first).
        """
        if self._spec is None:
            raise RuntimeError(f"{self.point_dir}: no point spec (the rank's failure says why)")
        return self._spec

    @property
    def ok(self) -> bool:
        """No failure so far."""
        return self.failure is None

    def read_input(self, read: Callable[[], T], site: str = "rank-spec") -> T | None:
        """``read()``, a read of what the driver wrote for this rank (``spec.json``, the device budget, the searched
        batch; a batch search's state), run as the attributed ``site`` (:mod:`sweeper.job.faults`) inside
        :meth:`attempt` (phase ``setup``; injected as at step 0): its value, or None when it failed (the failure
        is kept)."""
        from sweeper.job.faults import attributed

        def work() -> T:
            with attributed(site, 0):
                return read()

        return self.attempt(work, PhaseTracker())

    def write_unmeasured(self) -> int:
        """Write the rank file of a rank that measured nothing (:meth:`write` with ``steps_completed`` None, empty
        ``setup`` and ``memory``): its work never began, or a batch search's trial failed. Returns the exit code (1
        when failed)."""
        return self.write(self.header(), {"steps_completed": None, "setup": {}, "memory": {}})

    def header(self) -> RankFile:
        """The fields every rank file starts with: ``rank``, ``world_size``, ``pid``, ``host``."""
        return {"rank": self.rank, "world_size": self.world_size, "pid": os.getpid(), "host": os.uname().nodename}

    def attempt(
        self,
        work: Callable[[], T],
        phase: PhaseTracker,
        on_error: Callable[[BaseException, PhaseTracker], None] | None = None,
    ) -> T | None:
        """Run ``work()`` and return what it returns; any exception (every failure is a result, ``BaseException``
        included) is kept as :attr:`failure` instead, with ``phase``'s phase and step, and None is returned. Only the
        first failure is kept: a later ``attempt`` (the rank's fields after training) never hides the cause.

        A fault of sweeper's own code (:func:`sweeper.job.faults.site_of`: a ``HarnessFault``, or an exception
        through MemTracker's hooks) carries its ``site``, which the driver records as ``internal``.

        ``on_error(exc, phase)``, when given, sees the exception first (a batch-search trial leaves at once on an
        out-of-memory error, :func:`sweeper.job.batch_trials.run_search`).
        """
        from sweeper.job.faults import site_of

        try:
            return work()
        except BaseException as e:  # noqa: BLE001 - every failure is a result
            if on_error is not None:
                on_error(e, phase)
            if self.failure is None:
                self.failure = {
                    "exception_type": type(e).__name__,
                    "message": str(e)[:MESSAGE_CHARS],
                    "traceback": traceback.format_exc()[-TRACEBACK_CHARS:],
                    "phase": phase.phase,
                    "step": phase.step,
                }
                site = site_of(e)
                if site is not None:
                    self.failure["site"] = site
            return None

    def write(self, out: RankFile, fields: RankFile) -> int:
        """Write this rank's ``rank<r>.json`` atomically: ``out`` (:meth:`header` and what the work added), then
        ``status`` (``ok``/``failed``) and ``failure`` (when failed), then ``fields``. Returns the rank's exit
        code: 0 when ok, 1 when failed.

        A field that does not serialise (a bug of sweeper's own) is left out and the rank is failed at the site
        ``rank-file`` (``internal``), the fields that serialise kept; its first failure, when it had one, stays.

        Raises:
            OSError: the point directory cannot be written (the rank then ends without a rank file).
        """
        from sweeper.job.faults import HarnessFault, inject

        data: RankFile = {**out, **fields}  # type: ignore[typeddict-item]
        bad: list[str] = []
        try:
            inject("rank-file")
            json.dumps(data)
        except Exception as e:  # noqa: BLE001 - a bug of sweeper's own: keep what serialises, say what did not
            for k in [k for k in data if k != "rank"]:
                try:
                    json.dumps(data[k])  # type: ignore[literal-required]
                except Exception:  # noqa: BLE001 - the same, per field
                    bad.append(k)
                    del data[k]  # type: ignore[misc]
            after = PhaseTracker()
            after.phase = "train"  # after training: the fields of what was measured
            fault = HarnessFault("rank-file", ValueError(f"fields {bad} left out: {type(e).__name__}: {e}"))
            self.attempt(lambda: _raise(fault), after)
        data["status"] = "ok" if self.ok else "failed"
        if self.failure is not None:
            data["failure"] = self.failure
        write_rank_file(self.point_dir, data)
        return 0 if self.ok else 1


def _raise(e: BaseException) -> None:
    raise e


def user_callbacks(spec: PointSpec) -> list[Any]:
    """The point's own ``TrainerCallback``s (``callbacks``: Hydra ``_target_`` entries), instantiated with their
    secret arguments revealed from the environment (:func:`sweeper.redact.reveal`); ``[]`` when it has none."""
    if not spec.callbacks:
        return []
    from hydra.utils import instantiate

    from sweeper.redact import reveal

    return [instantiate(c) for c in reveal(spec.callbacks)]


def main(argv: list[str] | None, modes: dict[str, Mode], prog: str) -> int:
    """The entry point of one rank: the orphan guard, then ``modes[<mode>](point_dir)``.

    Args:
        argv: ``[point_dir]`` (the first mode) or ``["--mode=<name>", point_dir]``; None: ``sys.argv[1:]``.
        modes: mode name -> mode, the first one the default.
        prog: the module named in the usage line.

    Returns:
        The rank's exit code: the mode's; 1 when orphaned at start; 2 for a usage error.
    """
    from sweeper.job.orphan import orphaned_at_start

    if orphaned_at_start():
        return 1
    argv = sys.argv[1:] if argv is None else list(argv)
    mode = next(iter(modes))
    if argv and argv[0].startswith("--mode="):
        mode = argv.pop(0).split("=", 1)[1]
    if len(argv) != 1 or mode not in modes:
        print(f"usage: python -m {prog} [--mode={'|'.join(modes)}] <point_dir>", file=sys.stderr)
        return 2
    return modes[mode](Path(argv[0]))


def exit_now(code: int) -> None:
    """Flush stdout and stderr and end the process with ``code`` at once: no interpreter teardown (about 3 s of
    module/thread cleanup for torch + transformers on 2 cores, measured by ``benchmarks/harness_overhead.py``), no
    collective. Called once the rank file (or a trial's OOM verdict) is written; nothing after it needs cleanup."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
