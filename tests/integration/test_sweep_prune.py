"""Pre-flight pruning end to end: a real local multirun of the tiny model on 2 CPU ranks with ``prune=true`` and a
deliberately small device memory (``cluster.gpu_mem_gib=0.05``, a 51.2 MiB tensor-byte budget per CPU rank): batch 4
runs, batch 64 is predicted not to fit.

Exactly the points the model (:func:`sweeper.capacity.predict.predict`, on the same specs and target) says do not fit
are pruned, the others run ``ok``; every record carries predicted numbers; the results and the report show
predicted beside measured and list the pruned points apart. A single pruned point exits 2 like a refusal.
"""

from __future__ import annotations

import pandas as pd
import pytest

from sweeper.capacity.predict import predict
from sweeper.config.spec import PointSpec
from sweeper.point.lifecycle import target_for
from tests.conftest import run_sweeper

pytestmark = pytest.mark.slow

CLUSTER = ["cluster.gpu_mem_gib=0.05"]
FAST = ["warmup_steps=1", "timed_steps=3", "memory_steps=1", "profile_steps=0", "profile_trace=false"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    args = ["-m", "per_device_batch_size=4,64", "prune=true", *CLUSTER, *FAST]
    run = run_sweeper(args, tmp_path_factory.mktemp("prune"))
    assert run.proc.returncode == 0, run.output[-4000:]
    return run


def _fits(record) -> bool | None:
    spec = PointSpec.from_dict(record.spec)
    return predict(spec, target_for(spec, "local", {"name": "local", "gpu_mem_gib": 0.05})).fits


def test_exactly_the_points_predicted_not_to_fit_are_pruned_and_the_others_run(sweep):
    records = sweep.records()
    assert len(records) == 2
    fits = {r.spec["per_device_batch_size"]: _fits(r) for r in records}
    assert False in fits.values() and True in fits.values()  # the grid tests both outcomes
    for r in records:
        expected = "ok" if fits[r.spec["per_device_batch_size"]] else "pruned"
        assert r.status == expected, (r.spec["per_device_batch_size"], r.reason)
        if r.status == "pruned":
            assert r.failure["rule"] == "C01"
            assert "MiB per device" in r.reason and "51.20 MiB capacity" in r.reason and "5 % margin" in r.reason
            assert not (sweep.sweep_dir / "points" / r.point_id / "ranks.log").exists()  # never launched


def test_every_record_carries_predicted_numbers_and_ok_points_a_predicted_throughput(sweep):
    for r in sweep.records():
        assert r.predicted["peak_bytes"] > 0 and r.predicted["device_mem_bytes"] == int(0.05 * 2**30)
        if r.status == "ok":  # CPU: predicted from the point's own measured matmul peak
            assert r.predicted["tokens_per_s_per_device"] > 0
            assert r.predicted["peak_flops"] == r.metrics["mfu_peak_flops"]
    df = pd.read_csv(sweep.sweep_dir / "results.csv")
    ok = df[df["status"] == "ok"]
    for col in ("predicted_peak_bytes", "predicted_tokens_per_s_per_device", "peak_mem_rel_error"):
        assert ok[col].notna().all(), col
    err = (ok["predicted_peak_bytes"] - ok["peak_mem_bytes"]) / ok["peak_mem_bytes"]
    assert ok["peak_mem_rel_error"].tolist() == pytest.approx(err.tolist())
    assert df.loc[df["status"] == "pruned", "predicted_fits"].eq(False).all()


def test_the_report_lists_the_pruned_apart_and_the_terminal_gives_the_error_and_calibration(sweep):
    text = sweep.report.read_text()
    sections = {s.split("\n", 1)[0]: s for s in text.split("\n## ")[1:]}
    pruned = [r for r in sweep.records() if r.status == "pruned"]
    for r in pruned:
        assert r.point_id in sections["Pruned before launch"]
        assert r.point_id not in sections["Failures"]
    assert "median \\|error\\|" in sections["Predicted vs measured"]
    assert "plan.efficiency=" in sections["Predicted vs measured"]
    assert "Predicted vs measured: peak memory: median |error|" in sweep.output
    n_ok = sum(r.status == "ok" for r in sweep.records())
    assert f"calibrated on {n_ok} ok point" in sweep.output
    # measured on CPUs: no command invites planning a GPU cluster with a CPU's efficiency, the line says why
    assert "plans CPU hosts like this one, not a GPU cluster" in sweep.output  # predicted.CPU_EFFICIENCY
    assert sweep.last_line.startswith("Report: ")


def test_a_single_pruned_point_exits_2_like_a_refusal_and_makes_no_directory(tmp_path):
    run = run_sweeper(["per_device_batch_size=64", "prune=true", *CLUSTER, *FAST], tmp_path)
    assert run.proc.returncode == 2, run.output[-3000:]
    assert "sweeper: pruned point (prune, cluster.gpu_mem_gib" in run.proc.stderr
    assert not (tmp_path / "multirun").exists()
