"""A point's outcome from its rank files: what ran (the ranks' verified ``setup``, the record's ``ran``), what it
measured (:mod:`sweeper.results.metrics`), the files it left, and the status
:func:`sweeper.failures.attribution.decide_status` decides.

Driver side, no torch. :func:`sweeper.point.lifecycle.finish` calls it for every launcher.
"""

from __future__ import annotations

from typing import Any

from sweeper.config.spec import PointSpec
from sweeper.failures.attribution import decide_status
from sweeper.results.metrics import metrics_from_ranks
from sweeper.results.rankfile import RankFile


def summarize_ranks(
    spec: PointSpec,
    ranks: list[RankFile],
    *,
    returncode: int | None,
    timed_out: bool,
    log_tail: str,
    steps: dict[int, int] | None = None,
) -> dict[str, Any]:
    """Status, reason, error kind, what ran, metrics, failure and artifacts of a point from its rank files.

    Args:
        ranks: the parsed ``rank<r>.json`` files (possibly fewer than the world size if a rank died hard).
        returncode: the rank launcher's exit code, None if unknown. timed_out: the point ran past ``spec.timeout_s``.
        log_tail: the end of the ranks' combined log, kept for failures no rank could report.
        steps: rank -> optimizer steps finished, from the ``rank<r>.step`` files
            (:func:`sweeper.results.rankfile.read_rank_steps`): says at which step a rank killed by a signal died.

    Returns:
        Keyword arguments for :class:`sweeper.results.record.Record` (``status, reason, error_kind, ran, metrics,
        failure, artifacts``): ``ran`` from the first rank that verified its ``setup``, ``metrics`` from
        :func:`sweeper.results.metrics.metrics_from_ranks`, ``artifacts`` from every rank, the rest from
        :func:`sweeper.failures.attribution.decide_status`.
    """
    setup = next((r["setup"] for r in ranks if r.get("setup")), {})
    metrics = metrics_from_ranks(spec, ranks)
    artifacts: dict[str, str] = {}
    for r in ranks:
        artifacts.update(r.get("artifacts") or {})
    status = decide_status(spec, ranks, returncode=returncode, timed_out=timed_out, log_tail=log_tail, steps=steps)
    return {"ran": setup, "metrics": metrics, "artifacts": artifacts, **status}
