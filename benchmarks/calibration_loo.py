"""The time model's error on points it was not calibrated on: leave-one-out over measured sweeps, the model as it is
side by side with the two calibration rules it had before 2026-12-05 (issue 21).

For every ``ok`` point of each sweep: calibrate on every other ``ok`` point of that sweep
(:func:`sweeper.capacity.calibrate.fit_calibration`), predict the left-out point
(:func:`sweeper.capacity.predict.predict`, this host's link from ``SWEEPER_CACHE_DIR``) and take measured tokens/s per
device / predicted − 1 (**point out**: on a grid of two batch sizes its group keeps one point, the one-batch-size
case); then again with every point of its calibration group (engine family, gc, precision) left out (**group
out**: the group must be borrowed, the case of a sweep or a search that has not measured it). Four variants, in
one run, on the same points:

- ``now``: a group measured at one batch size borrows the median overhead of the groups fitted on two; a missing
  group borrows from its own engine family (other gc) before another family;
- ``no overhead borrow``: a one-batch-size group has no overhead (the rule before);
- ``other family first``: a missing group borrows the same gc in another family first (the order before);
- ``before``: both old rules (main at 47b3038).

The variants are made here by swapping the two functions for their old behaviour; the product has only ``now``.
Printed per variant: median, 90th percentile and largest |error| over every left-out point, and the count.

    python benchmarks/calibration_loo.py SWEEP_DIR [SWEEP_DIR ...] [--cache CACHE_DIR ...]

``--cache``: the ``SWEEPER_CACHE_DIR`` each sweep ran with (default: ``cache<i>`` beside ``grid<i>``/``repeat<i>``).
"""

from __future__ import annotations

import argparse
import os
import statistics
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def variant(name: str):
    """Swap in the old calibration rules that ``name`` asks for (see the module doc)."""
    from sweeper.capacity import calibrate

    fit, group_for = calibrate._fit, calibrate.Calibration.group_for

    def old_order(self, spec):
        fam, gc, prec = calibrate.family(spec), spec.gc, spec.precision
        others = [f for f in calibrate.FAMILIES if f != fam]
        order = [(fam, gc, prec), *[(f, gc, prec) for f in others], (fam, not gc, prec)]
        order += [(f, not gc, prec) for f in others]
        return next((k for f, g, p in order if (k := calibrate.group_key(f, g, p)) in self.groups), None)

    if name in ("no overhead borrow", "before"):
        calibrate._fit = lambda points, borrowed=None: fit(points, None)
    if name in ("other family first", "before"):
        calibrate.Calibration.group_for = old_order
    try:
        yield
    finally:
        calibrate._fit, calibrate.Calibration.group_for = fit, group_for


def loo(sweep: Path, group_out: bool) -> list[float]:
    """Relative errors (measured / predicted − 1) of every ok point of ``sweep`` left out in turn (with its whole
    calibration group when ``group_out``)."""
    from sweeper.capacity.calibrate import family, group_key
    from sweeper.config.spec import PointSpec
    from sweeper.point.lifecycle import target_for
    from sweeper.results.record import read_record
    from sweeper.search.decide import calibration, guess

    ok = [r for p in sorted(sweep.glob("points/*/result.json")) if (r := read_record(p)).status == "ok"]
    specs = [PointSpec.from_dict(r.spec) for r in ok]
    keys = [group_key(family(s), s.gc, s.precision) for s in specs]
    out = []
    for i, (r, spec) in enumerate(zip(ok, specs, strict=True)):
        rest = [q for j, q in enumerate(ok) if j != i and not (group_out and keys[j] == keys[i])]
        pred = guess(spec, target_for(spec, "local", None), calibration(rest)).tokens_per_s_per_device
        if pred and (r.metrics or {}).get("tokens_per_s_per_device"):
            out.append(r.metrics["tokens_per_s_per_device"] / pred - 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="+", type=Path)
    ap.add_argument("--cache", nargs="*", type=Path)
    args = ap.parse_args()
    caches = args.cache or [s.parent / s.name.replace("grid", "cache").replace("repeat", "cache") for s in args.sweeps]
    for group_out in (False, True):
        print("group out (the group borrowed)" if group_out else "point out")
        for name in ("now", "no overhead borrow", "other family first", "before"):
            errors: list[float] = []
            with variant(name):
                for sweep, cache in zip(args.sweeps, caches, strict=True):
                    os.environ["SWEEPER_CACHE_DIR"] = str(cache)
                    errors += loo(sweep, group_out)
            a = sorted(abs(e) for e in errors)
            p90 = statistics.quantiles(a, n=10, method="inclusive")[-1] if len(a) > 1 else a[0]
            print(f"  {name:>20}: {len(a)} left-out points, |error| median {statistics.median(a):.1%}, "
                  f"p90 {p90:.1%}, largest {a[-1]:.1%}")  # fmt: skip


if __name__ == "__main__":
    main()
