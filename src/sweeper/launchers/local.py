"""Run one grid point on this machine: refuse it, or start its ranks, wait (bounded), and turn what they wrote into
a record.

The local launcher decides what a point runs: a ``per_device_batch_size=auto`` point first searches its largest
batch (:func:`sweeper.launchers.batch_search.search_batch`, ``docs/batch-search.md``), then every point is measured
at its batch. The ranks run under torchrun (:mod:`sweeper.launchers.torchrun`); the record is made by
:func:`sweeper.point.lifecycle.finish`, as for every launcher. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import replace

from sweeper.config.sections import ClusterConfig
from sweeper.config.spec import PointSpec
from sweeper.launchers.batch_search import search_batch
from sweeper.launchers.torchrun import launch_ranks, record_launch
from sweeper.point.device_budget import write_budget
from sweeper.point.lifecycle import Prepared, begin, target_for
from sweeper.results.record import Record
from sweeper.results.sweepdir import SweepDir


def run_point(
    spec: PointSpec,
    overrides: list[str],
    sweep: SweepDir,
    rerun: frozenset[str] = frozenset(),
    cluster: ClusterConfig | None = None,
) -> Record:
    """Run (or refuse) one point on this machine: :func:`sweeper.point.lifecycle.begin`, its ranks under
    torchrun (bounded by ``timeout_s``), then :func:`sweeper.point.lifecycle.finish`. ``cluster`` is the
    typed ``cluster`` section (device memory for capacity planning).

    Returns:
        The record written (or found). Never raises for a failing point: every outcome is a record.
    """
    prepared = begin(spec, overrides, sweep, target_for(spec, "local", cluster), rerun)
    if isinstance(prepared, Record):
        return prepared
    return run_prepared(prepared)


def run_prepared(prepared: Prepared) -> Record:
    """Start a prepared point's ranks, wait (bounded by ``timeout_s`` and by the host-memory limit), and record
    what they left (:func:`sweeper.launchers.torchrun.record_launch`: the host-memory limit and the ranks' RSS peak,
    bytes, in every record; ``host_oom`` when stopped at the limit).

    With ``per_device_batch_size=auto`` the largest batch that fits is searched first
    (:func:`sweeper.launchers.batch_search.search_batch`); the point is then measured at the batch found, its
    record's ``ran["batch_search"]`` holding the search, or the search's own record is returned (nothing fits, or
    the search was stopped). The device budget (``cluster.gpu_mem_gib``, :mod:`sweeper.point.device_budget`) is
    written beside ``spec.json`` for the ranks.
    """
    setup = None
    if prepared.spec.batch_search:
        found = search_batch(prepared)
        if isinstance(found, Record):
            return found
        prepared = replace(prepared, spec=prepared.spec.with_batch(found.batch))
        setup = {"batch_search": found.search}
    write_budget(prepared.pdir, prepared.target)
    return record_launch(prepared, launch_ranks(prepared.spec, prepared.pdir), setup)
