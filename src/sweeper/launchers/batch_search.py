"""The driver side of ``per_device_batch_size=auto`` (local launcher): search the largest batch that fits; the
local launcher (:func:`sweeper.launchers.local.run_prepared`) then measures the point at it.
``docs/batch-search.md`` is the user's page; :mod:`sweeper.point.batch_search` decides the trials,
:mod:`sweeper.job.batch_trials` runs them (the ranks' mode ``search``).

1. The device budget (``cluster.gpu_mem_gib``) and the search state are written into the point directory; the
   search is seeded by the memory model's largest batch (:func:`sweeper.capacity.predict.max_batch_size`, else 1).
2. The ranks run trials inside one launch, agreeing on each verdict. A rank that runs out of memory mid-step leaves
   its verdict and exits; torchrun stops the others; the driver records that ``oom`` trial and launches the ranks
   again, from the trials so far. All launches of a search together are bounded by ``timeout_s``.
3. The point is measured at the batch found, as any point at that batch: its record's ``spec`` says the batch that
   ran (``overrides`` and ``replay`` keep ``per_device_batch_size=auto``) and ``setup["batch_search"]`` holds the
   search (settings, every trial with its batch, outcome and peak bytes, the launches, the answer). When not even one
   sample fits, the point is ``oom`` with the trials, and nothing is measured.

An earlier search of the point under the same capacity and margin (a resumed or rerun point) is continued, not
repeated: delete ``batch_search.json`` in the point directory to search again.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sweeper.config.target import Target
from sweeper.failures.reasons import internal_reason
from sweeper.failures.text import traceback_tail
from sweeper.job.faults import HarnessFault, attributed
from sweeper.launchers.torchrun import LOG_FILE, SEARCH, Launch, launch_ranks, record_launch
from sweeper.point.batch_search import OOM_FILE, SearchState, Trial
from sweeper.point.device_budget import write_budget
from sweeper.point.lifecycle import Prepared, finish
from sweeper.results.atomic import is_disk_full
from sweeper.results.record import Record
from sweeper.units import format_bytes

T = TypeVar("T")


@dataclass
class Found:
    """The answer of a search: the largest batch that fits, to measure the point at.

    Attributes:
        batch: per-device batch size (samples).
        search: the search as the record's ``setup["batch_search"]`` holds it (settings, trials, launches, answer,
            ``search_wall_s`` in seconds).
    """

    batch: int
    search: dict[str, Any]


def search_batch(prepared: Prepared) -> Found | Record:
    """Search the largest batch of a ``per_device_batch_size=auto`` point (see the module doc); the point directory
    is left clear of the trials' rank files for the measurement.

    The search's own code here (its state after each launch, the next batch, the ranks' OOM verdicts) is the site
    ``search-driver`` (:mod:`sweeper.job.faults`): a fault there is the point's ``error`` / ``internal`` record,
    with the trials so far; a full disk still propagates (the point is then not recorded).

    Returns:
        The batch found; or the record written when there is nothing to measure: ``oom`` when not even one sample
        fits, or the failure that stopped the search (error, timeout, host_oom), at the batch it was trying. Never
        raises for a failing point.
    """
    pdir, spec = prepared.pdir, prepared.spec
    budget = write_budget(pdir, prepared.target)
    state = _initial_state(pdir, prepared, budget["capacity_bytes"])
    t0 = time.perf_counter()
    batch: int | None = None
    try:
        while (trial := _own(state.next_batch)) is not None:  # None once the search is done
            batch = trial[0]
            _clear(pdir)
            state.launches += 1
            _own(partial(state.write, pdir))
            remaining = max(1.0, spec.timeout_s - (time.perf_counter() - t0))
            launch = launch_ranks(spec.with_batch(batch), pdir, SEARCH, timeout_s=remaining)
            with attributed(DRIVER_SITE, state.launches):  # injected with the launches so far as its step
                state, verdict = _after_launch(pdir, launch)
            if not verdict:  # the launch ended without a verdict: that failure is the point's record
                return _stopped(prepared, state, batch, launch, time.perf_counter() - t0)
        search = {**state.to_dict(), "search_wall_s": round(time.perf_counter() - t0, 3)}
        if not state.answer:
            return _own(partial(_none_fits, prepared, state, search))
    except HarnessFault as e:
        if is_disk_full(e.cause):
            raise e.cause from None  # not a bug: the point is not recorded (sweeper.__main__)
        return _internal(prepared, state, batch, e, time.perf_counter() - t0)
    _clear(pdir)
    return Found(state.answer, search)


#: The fault site of the driver's side of a search (sweeper.job.faults.SITES).
DRIVER_SITE = "search-driver"


def _own(fn: Callable[[], T]) -> T:
    """``fn()`` as the site ``search-driver``, never injected (the site is injected after a launch)."""
    with attributed(DRIVER_SITE, at=None):
        return fn()


def _after_launch(pdir: Path, launch: Launch) -> tuple[SearchState, bool]:
    """The search state after ``launch`` (rank 0's, with the launch's ``oom`` trial added and written), and whether
    the launch ended with a verdict: an ``oom`` trial, or the search done.

    Raises:
        OSError, ValueError, TypeError, AttributeError: the state cannot be read or written.
        RuntimeError: every rank ended well, but the search is not done (the ranks' search and the driver's differ).
    """
    state = SearchState.load(pdir)
    ooms = _read_ooms(pdir)
    if ooms and not launch.timed_out:
        state.trials.append(_oom_trial(ooms, ended=time.time()))
        state.write(pdir)
        return state, True
    if not state.done and launch.returncode == 0 and not (launch.timed_out or launch.host_oom):
        raise RuntimeError(
            f"the search's ranks ended well after {len(state.trials)} trial(s) but the search is not done"
        )
    return state, state.done


def _initial_state(pdir: Path, prepared: Prepared, capacity: int | None) -> SearchState:
    """The state of an earlier search of this point under the same capacity and margin, else a new one seeded by
    the memory model."""
    margin = float(prepared.spec.plan.memory_margin)
    old = SearchState.read(pdir)
    if old is not None and old.margin == margin and (capacity is None or old.capacity_bytes == capacity):
        return old
    seed, source = seed_batch(prepared.spec.with_batch(1), prepared.target)
    return SearchState(capacity, margin, seed, source)


def seed_batch(spec: Any, target: Target) -> tuple[int, str]:
    """The first batch to try and where it comes from: the memory model's largest batch that fits
    (:func:`sweeper.capacity.predict.max_batch_size`), else 1 (no capacity or architecture known to the model, or the
    model predicts that nothing fits: then the search still checks batch 1)."""
    try:
        from sweeper.capacity.predict import max_batch_size

        predicted = max_batch_size(spec, target)
    except Exception as e:  # noqa: BLE001 - a failing prediction must not stop the search
        return 1, f"1 (the memory model failed: {type(e).__name__}: {e})"
    if predicted is None:
        return 1, "1 (the memory model knows no capacity or architecture for this point)"
    if predicted < 1:
        return 1, "1 (the memory model predicts that not even one sample fits)"
    return int(predicted), "sweeper.capacity.predict.max_batch_size"


def _clear(pdir: Path) -> None:
    """Remove what a launch leaves (rank files, progress files, OOM verdicts) before the next one."""
    for pattern in ("rank*.json", "rank*.step", OOM_FILE.format(rank="*")):
        for path in pdir.glob(pattern):
            path.unlink(missing_ok=True)


def _read_ooms(pdir: Path) -> list[dict[str, Any]]:
    """The OOM verdicts the ranks of the last launch left, by rank."""
    out = []
    for path in sorted(pdir.glob(OOM_FILE.format(rank="*"))):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return sorted(out, key=lambda v: v["rank"])


def _oom_trial(ooms: list[dict[str, Any]], ended: float) -> Trial:
    """The ``oom`` trial of one launch: the first rank's verdict; every rank that ran out is listed, and
    ``teardown_s``: seconds from that rank's verdict to the end of the launch (the launcher stopping the others)."""
    first = ooms[0]
    oom = {
        **(first.get("oom") or {}),
        "message": first["message"],
        "exception_type": first["exception_type"],
        "phase": first.get("phase"),
        "step": first.get("step"),
        "ranks": [v["rank"] for v in ooms],
        "teardown_s": round(ended - first["time"], 3) if first.get("time") else None,
    }
    return Trial(first["batch"], "oom", first["chosen_by"], rank=first["rank"], oom=oom, launch=first["launch"])


def _stopped(prepared: Prepared, state: SearchState, batch: int, launch: Launch, wall_s: float) -> Record:
    """The record of a search stopped by something other than memory, at the batch it was trying."""
    search = {**state.to_dict(), "search_wall_s": round(wall_s, 3), "stopped_at_batch": batch}
    return record_launch(replace(prepared, spec=prepared.spec.with_batch(batch)), launch, {"batch_search": search})


def _internal(prepared: Prepared, state: SearchState, batch: int | None, fault: HarnessFault, wall_s: float) -> Record:
    """The ``error`` / ``internal`` record of a search stopped by a fault of its own driver code (``fault``), with
    the trials so far (rank 0's state where it can still be read, else the driver's ``state``), at the batch it was
    trying (the seed before the first launch)."""
    cause = fault.cause
    state = SearchState.read(prepared.pdir) or state
    search = {**state.to_dict(), "search_wall_s": round(wall_s, 3), "stopped_at_batch": batch}
    short, message = type(cause).__name__, str(cause)
    tb = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
    outcome = {
        "status": "error",
        "error_kind": "internal",
        "reason": internal_reason(fault.site, short, message, kept="the trials before it are kept (ran.batch_search)"),
        "ran": {"batch_search": search},
        "metrics": {},
        "failure": {
            "site": fault.site,
            "exception_type": short,
            "message": message[:2000],
            "traceback_tail": traceback_tail(tb),
            "phase": "setup",
        },
        "artifacts": {},
    }
    return finish(
        replace(prepared, spec=prepared.spec.with_batch(batch or state.seed)),
        [],
        returncode=None,
        timed_out=False,
        log_tail="",
        wall_time_s=round(wall_s, 3),
        outcome=outcome,
        artifacts={"log": LOG_FILE},
    )


def _none_fits(prepared: Prepared, state: SearchState, search: dict[str, Any]) -> Record:
    """The ``oom`` record of a search in which not even one sample per device fits."""
    one = next(t for t in state.trials if t.batch == 1)
    if one.outcome == "oom":
        how = f"ran out of memory on rank {one.rank}"
    else:
        how = f"peaked at {format_bytes(one.peak_bytes)} on the largest rank"
    reason = (
        f"per_device_batch_size=auto: not even one sample per device fits: batch 1 {how}, over the "
        f"{format_bytes(state.usable_bytes)} usable ({format_bytes(state.capacity_bytes)} capacity x (1 - margin "
        f"{state.margin:g})); shard more (fsdp=full_shard or zero=3), gc=true, more ranks, or a device with more memory"
    )
    failure = {**(one.oom or {}), "rank": one.rank, "phase": (one.oom or {}).get("phase") or "train", "batch": 1}
    outcome = {
        "status": "oom",
        "reason": reason,
        "error_kind": None,
        "ran": {"batch_search": search},
        "metrics": {},
        "failure": failure,
        "artifacts": {},
    }
    return finish(
        replace(prepared, spec=prepared.spec.with_batch(1)),
        [],
        returncode=None,
        timed_out=False,
        log_tail="",
        wall_time_s=search["search_wall_s"],
        outcome=outcome,
        artifacts={"log": LOG_FILE},
    )
