"""Sweeps compared point by point (sweeper.report.compare, compare_page, the report CLI with several sweeps):
alignment by configuration (seed and model left out), changes beyond the noise, regressions only like for like,
the page's files, its text never markup, the exit status of --fail-on-regression."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from sweeper.report.cli import REGRESSION_EXIT, main, sweep_dirs
from sweeper.report.compare import (
    FASTER,
    LESS_MEMORY,
    MORE_MEMORY,
    NEWLY_FAILING,
    NEWLY_FITTING,
    ONLY_BASELINE,
    ONLY_HERE,
    SAME,
    SLOWER,
    STOPPED_FITTING,
    Side,
    compare_all,
)
from sweeper.report.compare_page import CSV, HTML, MD, PNG, figure, headline, write_comparison
from sweeper.results.record import Record
from sweeper.results.sweepdir import SweepDir
from tests.unit.specs import TINY, make_spec
from tests.unit.test_report_markup import HOSTILE, Page

ENV = {"device_type": "cpu", "cpu": "AMD EPYC", "cpu_count": 2, "host": "vm", "hosts": ["vm", "vm"]}
LIBS = {"torch": "2.13.0", "transformers": "5.25.0"}


def record(sweep_id: str, fsdp: str, gc: bool, *, seed: int = 0, tps: float = 1000.0, ci: float = 0.05,
           mem: int = 10 * 2**20, status: str = "ok", model: str = "tiny", env: dict | None = None,
           contended: bool = False) -> Record:  # fmt: skip
    """A record of the 2x2 grid: tokens/s per device ``tps`` with a +-``ci`` relative interval of its step time."""
    spec = make_spec(fsdp=fsdp, gc=gc, seed=seed, model={**TINY, "name": model})
    step = 0.05
    metrics = {}
    if status == "ok":
        metrics = {
            "tokens_per_s_per_device": tps,
            "step_time_s_median": step,
            "step_time_s_ci95_low": step * (1 - ci),
            "step_time_s_ci95_high": step * (1 + ci),
            "peak_mem_bytes": mem,
            "contended": contended,
        }
    overrides = [f"fsdp={fsdp}", f"gc={str(gc).lower()}", f"seed={seed}"]
    pid = f"{sweep_id}{fsdp[:2]}{int(gc)}{seed}".ljust(12, "0")[:12]
    return Record(sweep_id=sweep_id, point_id=pid, status=status, overrides=overrides, spec=spec.to_dict(),
                  metrics=metrics, env={**ENV, **LIBS, **(env or {})}, reason=None if status == "ok" else "planted")  # fmt: skip


def sweep(tmp_path: Path, sweep_id: str, records: list[Record]) -> Path:
    path = tmp_path / sweep_id
    sd = SweepDir(path)
    (path / "points").mkdir(parents=True)
    (path / "sweep.json").write_text(json.dumps({"sweep_id": sweep_id}))
    for r in records:
        sd.write_record(r)
    return path


def verdict_of(c, fsdp: str, gc: bool) -> str:
    return next(x.verdict for x in c.changes if (json.loads(x.key)["fsdp"], json.loads(x.key)["gc"]) == (fsdp, gc))


GRID = [("none", True), ("none", False), ("full_shard", True), ("full_shard", False)]


def test_a_rerun_with_another_seed_aligns_every_point_and_only_a_change_beyond_the_noise_is_one(tmp_path):
    a = sweep(tmp_path, "aaaaaa", [record("aaaaaa", f, g) for f, g in GRID])
    b_recs = [record("bbbbbb", f, g, seed=1, tps=1030.0) for f, g in GRID[:2]]  # +3 %: inside the +-5 % intervals
    b_recs.append(record("bbbbbb", "full_shard", True, seed=1, tps=600.0))  # -40 %: beyond
    b_recs.append(record("bbbbbb", "full_shard", False, seed=1, tps=1000.0, mem=12 * 2**20))  # +20 % memory
    b = sweep(tmp_path, "bbbbbb", b_recs)
    (c,) = compare_all([Side.load(a), Side.load(b)])
    verdicts = {tuple(json.loads(x.key)[k] for k in ("fsdp", "gc")): x.verdict for x in c.changes}
    assert verdicts == {
        ("none", True): SAME,
        ("none", False): SAME,
        ("full_shard", True): SLOWER,
        ("full_shard", False): MORE_MEMORY,
    }
    assert c.like_for_like and len(c.regressions) == 2
    slower = next(x for x in c.changes if x.verdict == SLOWER)
    assert slower.throughput_ratio == pytest.approx(0.6) and slower.beyond_noise


def test_a_change_beyond_the_intervals_but_under_the_floor_is_no_change(tmp_path):
    a = sweep(tmp_path, "aaaaaa", [record("aaaaaa", "none", True, ci=0.01)])
    b = sweep(tmp_path, "bbbbbb", [record("bbbbbb", "none", True, tps=1040.0, ci=0.01)])  # +4 %: intervals apart
    sides = [Side.load(a), Side.load(b)]
    assert verdict_of(compare_all(sides)[0], "none", True) == SAME  # under the default 5 % floor
    assert verdict_of(compare_all(sides, min_change=0.03)[0], "none", True) == FASTER
    assert main([str(a), str(b), "--out", str(tmp_path / "o"), "--min-change", "0.03", "--fail-on-regression"]) == 0
    with pytest.raises(SystemExit):
        main([str(a), str(b), "--min-change", "5"])


def test_faster_less_memory_stopped_fitting_newly_failing_newly_fitting_and_configurations_on_one_side(tmp_path):
    a = sweep(
        tmp_path,
        "aaaaaa",
        [
            record("aaaaaa", "none", True),
            record("aaaaaa", "none", False),
            record("aaaaaa", "full_shard", True),
            record("aaaaaa", "full_shard", False, status="oom"),
        ],
    )
    b = sweep(
        tmp_path,
        "bbbbbb",
        [
            record("bbbbbb", "none", True, tps=2000.0),
            record("bbbbbb", "none", False, status="oom"),
            record("bbbbbb", "full_shard", False, mem=5 * 2**20),
            record("bbbbbb", "shard_grad_op", True),
        ],
    )
    (c,) = compare_all([Side.load(a), Side.load(b)])
    got = {(json.loads(x.key)["fsdp"], json.loads(x.key)["gc"]): x.verdict for x in c.changes}
    assert got == {
        ("none", True): FASTER,
        ("none", False): STOPPED_FITTING,
        ("full_shard", True): ONLY_BASELINE,
        ("full_shard", False): NEWLY_FITTING,
        ("shard_grad_op", True): ONLY_HERE,
    }
    assert [x.verdict for x in c.regressions] == [STOPPED_FITTING]
    b2 = sweep(tmp_path, "cccccc", [record("cccccc", "none", True, status="error")])
    (c2,) = compare_all([Side.load(a), Side.load(b2)])
    assert verdict_of(c2, "none", True) == NEWLY_FAILING
    b3 = sweep(tmp_path, "dddddd", [record("dddddd", "none", True, mem=5 * 2**20)])
    assert verdict_of(compare_all([Side.load(a), Side.load(b3)])[0], "none", True) == LESS_MEMORY


def test_sweeps_of_another_model_are_compared_as_such_never_as_a_regression(tmp_path):
    a = sweep(tmp_path, "aaaaaa", [record("aaaaaa", f, g) for f, g in GRID])
    b = sweep(tmp_path, "bbbbbb", [record("bbbbbb", f, g, tps=300.0, model="tiny-mistral") for f, g in GRID])
    (c,) = compare_all([Side.load(a), Side.load(b)])
    assert "model" in c.differs and not c.like_for_like
    assert {x.verdict for x in c.changes} == {SLOWER}  # aligned configuration by configuration
    assert c.regressions == []
    line = headline([c])[0]
    assert "different model" in line and "not regressions" in line and "1 regression" not in line
    assert main([str(a), str(b), "--out", str(tmp_path / "out"), "--fail-on-regression"]) == 0


def test_a_library_upgrade_is_like_for_like_and_named(tmp_path):
    a = sweep(tmp_path, "aaaaaa", [record("aaaaaa", "none", True)])
    b = sweep(tmp_path, "bbbbbb", [record("bbbbbb", "none", True, tps=500.0, env={"transformers": "5.26.0"})])
    (c,) = compare_all([Side.load(a), Side.load(b)])
    assert c.differs == ["libraries"] and c.like_for_like and len(c.regressions) == 1
    assert "library versions differ" in headline([c])[0]


def test_the_page_is_written_offline_with_a_plot_a_csv_and_user_text_that_stays_text(tmp_path):
    hostile = record("aaaaaa", "none", True)
    hostile.overrides.append(f"+training_args.run_name={HOSTILE.splitlines()[0]}")
    a = sweep(tmp_path, "aaaaaa", [hostile, record("aaaaaa", "none", False)])
    b = sweep(tmp_path, "bbbbbb", [record("bbbbbb", "none", True, tps=400.0, contended=True),
                                   record("bbbbbb", "none", False, seed=3)])  # fmt: skip
    sides = [Side.load(a), Side.load(b)]
    out = write_comparison(sides, compare_all(sides), tmp_path / "page")
    for name in (MD, HTML, PNG, CSV):
        assert (tmp_path / "page" / name).stat().st_size > 0, name
    text = out.read_text()
    assert text.splitlines()[2].startswith("- `bbbbbb` against `aaaaaa` (baseline): **1 regression**; 1 slower: ")
    assert "measured under CPU contention" in text
    page = Page((tmp_path / "page" / HTML).read_text())
    assert page.tags["script"] >= 1  # plotly's own, inlined
    assert "<script>alert(1)</script>" in page.flat  # the user's text, shown as text
    frame = pd.read_csv(tmp_path / "page" / CSV)
    assert sorted(frame["verdict"]) == sorted([SAME, SLOWER]) and frame["regression"].sum() == 1


def test_the_cli_compares_a_glob_exits_on_a_regression_and_refuses_a_sweep_given_twice(tmp_path, capsys):
    sweeps = tmp_path / "sweeps"
    a = sweep(sweeps, "aaaaaa", [record("aaaaaa", "none", True)])
    sweep(sweeps, "bbbbbb", [record("bbbbbb", "none", True, tps=100.0)])
    assert sweep_dirs([str(sweeps / "*")]) == [sweeps / "aaaaaa", sweeps / "bbbbbb"]
    out = tmp_path / "page"
    assert main([str(sweeps / "*"), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(out / MD)
    assert main([str(sweeps / "*"), "--out", str(out), "--fail-on-regression"]) == REGRESSION_EXIT
    assert main([str(a), str(a), "--out", str(out)]) == 2
    assert "given twice" in capsys.readouterr().err
    assert main([str(a), str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert main([str(a), str(out)]) == 2  # a comparison page is not a sweep
    assert "points" in capsys.readouterr().err


def test_a_sweep_id_from_a_hand_edited_sweep_json_is_text_in_the_plot_legends(tmp_path):
    hostile_id = "<b>x</b>$\\alpha$"
    a = sweep(tmp_path, "aaaaaa", [record("aaaaaa", "none", True), record("aaaaaa", "none", False)])
    b = tmp_path / "bbbbbb"
    (b / "points").mkdir(parents=True)
    (b / "sweep.json").write_text(json.dumps({"sweep_id": hostile_id}))
    for r in (record("bbbbbb", "none", True), record("bbbbbb", "none", False)):
        SweepDir(b).write_record(r)
    sides = [Side.load(a), Side.load(b)]
    assert sides[1].sweep_id == hostile_id
    write_comparison(sides, compare_all(sides), tmp_path / "page")  # the PNG draws it (no mathtext error)
    names = [t.name for t in figure(sides, ("MiB", 2**20)).data]
    assert "&lt;b&gt;x&lt;/b&gt;$\\alpha$" in names, names  # shown as typed, not as bold HTML
    assert hostile_id in Page((tmp_path / "page" / HTML).read_text()).flat  # the page's text: as typed
