"""What one calibration fit costs at the size of a large sweep, and what the frontier search's refits cost per
decision (issue 21: each decision refits the model once per measured point left out, up to 20).

The records of a measured sweep (``SWEEP_DIR``, its ``ok`` records) are repeated to ``--records`` records and
:func:`sweeper.capacity.calibrate.fit_calibration` is timed on them, best of ``--repeats``; side by side, in the
same run, the host key every record's link lookup asks for (``hostcomm.comm_key``), read once per process as now,
against reading it afresh (torch's package metadata) as before 2026-12-05.

    python benchmarks/calibration_fit.py SWEEP_DIR [--records 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def best(fn, repeats: int) -> float:
    """The least wall time of ``repeats`` calls, seconds."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep", type=Path)
    ap.add_argument("--records", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from sweeper.capacity import hostcomm
    from sweeper.capacity.calibrate import fit_calibration
    from sweeper.results.record import read_record

    ok = [r for p in sorted(args.sweep.glob("points/*/result.json")) if (r := read_record(p)).status == "ok"]
    if not ok:
        raise SystemExit(f"{args.sweep}: no ok record")
    records = (ok * (args.records // len(ok) + 1))[: args.records]
    fit = best(lambda: fit_calibration(records), args.repeats)
    cached = best(lambda: [hostcomm.comm_key(2) for _ in records], args.repeats)
    fresh = best(lambda: [hostcomm._host_key.__wrapped__() for _ in records], args.repeats)
    print(f"{len(records)} records: one fit {fit:.3f} s; the search's 21 fits per decision {21 * fit:.1f} s")
    print(f"host key for every record: read once per process {cached:.4f} s, read afresh {fresh:.3f} s "
          f"({fresh / max(cached, 1e-9):,.0f} x)")  # fmt: skip


if __name__ == "__main__":
    main()
