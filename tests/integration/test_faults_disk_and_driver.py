"""Filesystem and driver faults, for real: a sweep directory on a tmpfs that fills up mid-sweep, and a driver killed
with SIGKILL at seeded random moments. Each time a resume finishes the grid with every point recorded exactly once.

The full disk is real (a tmpfs mounted here; root only): a callback inside one point's rank fills it at a given step
(:class:`FillDisk`), so the moment it fills is the same in every run. The kill is real too (SIGKILL of the driver
only, never of its process group): the ranks it leaves must die with it (``docs/failures.md``).
"""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sweeper.results.atomic import write_error_text, write_json_atomic
from sweeper.results.record import FINAL_STATUSES, Record, RecordNotWritten, read_record
from sweeper.results.sweepdir import POINTS_DIR, RESULT_FILE, SweepDir
from tests.conftest import REPO

pytestmark = pytest.mark.slow

SMALL = [
    "warmup_steps=1",
    "timed_steps=3",
    "memory_steps=1",
    "profile_steps=0",
    "profile_trace=false",
    "wandb=off",
]
CHUNK = 1 << 16


class FillDisk:
    """A ``TrainerCallback`` (duck-typed: the harness only calls its hooks) that fills the filesystem of ``path``
    at optimizer step ``at_step`` of the point whose ``seed`` is ``seed``, by writing ``path`` until ENOSPC; once
    (``<path>.done`` marks it done).

    Usage: ``+callbacks=[{_target_:tests.integration.test_faults_disk_and_driver.FillDisk,path:'/mnt/fill',seed:1}]``.
    """

    def __init__(self, path: str, seed: int, at_step: int = 2) -> None:
        self.path, self.seed, self.at_step = Path(path), seed, at_step

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        spec = json.loads((Path(args.output_dir).parent / "spec.json").read_text())
        done = self.path.with_name(self.path.name + ".done")  # once per test: a resume must not fill it again
        if state.global_step != self.at_step or spec["seed"] != self.seed or done.exists():
            return
        done.touch()  # an empty file needs no data page on a tmpfs
        with open(self.path, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * CHUNK)
                    f.flush()
            except OSError:
                pass
        try:  # fill the last partial page too
            with open(self.path, "ab", buffering=0) as f:
                while f.write(b"\0"):
                    pass
        except OSError:
            pass


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.pop("SWEEPER_SWEEP_ID", None)
    env.setdefault("WANDB_MODE", "disabled")
    return env


def _cmd(args: list[str], sweep_dir: Path) -> list[str]:
    return [sys.executable, "-m", "sweeper", "-m", *args, *SMALL, f"hydra.sweep.dir={sweep_dir}"]


def _run(args: list[str], sweep_dir: Path, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(_cmd(args, sweep_dir), cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


def _results(sweep_dir: Path) -> dict[str, Path]:
    """Point id -> its result.json, for every point that has one."""
    return {p.parent.name: p for p in sorted((sweep_dir / POINTS_DIR).glob(f"*/{RESULT_FILE}"))}


def _fingerprint(sweep_dir: Path) -> dict[str, tuple[str, int]]:
    """Point id -> (result.json text, ranks.log size in bytes) of every recorded point: a point run again would
    change both (a new attempt appends to ranks.log, a new record replaces result.json)."""
    out = {}
    for pid, path in _results(sweep_dir).items():
        log = path.parent / "ranks.log"
        out[pid] = (path.read_text(), log.stat().st_size if log.exists() else -1)
    return out


def _assert_records_sound(sweep_dir: Path, tmp_files: bool = True) -> None:
    """Every result.json parses as a valid final record; with ``tmp_files``, no temporary file of the atomic writer
    (``.<name>.<random>.tmp``) is left. The rank's progress marker keeps one fixed-name ``.rank<r>.step.tmp`` when
    the disk is full (results/rankfile.py); the point's next attempt removes it."""
    for path in _results(sweep_dir).values():
        assert read_record(path).status in FINAL_STATUSES, path
    if tmp_files:
        leftovers = [p for p in sweep_dir.rglob(".*.tmp") if not p.name.endswith(".step.tmp")]
        assert not leftovers, leftovers


def _assert_recorded_once(sweep_dir: Path, n_points: int) -> None:
    results = _results(sweep_dir)
    assert len(results) == n_points, sorted(results)
    for pid, path in results.items():
        assert not list(path.parent.glob("result.*.json")), f"{pid} was recorded more than once"
        assert read_record(path).point_id == pid


@contextmanager
def _tmpfs(mnt: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (mount's syntax: ``64k``, ``32m``) mounted at ``mnt`` (root only), unmounted afterwards."""
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 32 MiB tmpfs at ``tmp_path/disk``: room for the whole sweep and its report, until :class:`FillDisk`."""
    with _tmpfs(tmp_path / "disk", "32m") as mnt:
        yield mnt


def test_a_write_that_fills_the_disk_keeps_the_old_file_leaves_no_temp_file_and_names_the_file(tmp_path):
    with _tmpfs(tmp_path / "disk", "64k") as mnt:
        target = mnt / "sweep.json"
        write_json_atomic(target, {"old": 1})
        with pytest.raises(OSError) as err:
            write_json_atomic(target, {"new": "x" * 200_000})
        assert err.value.errno == errno.ENOSPC and err.value.filename == str(target)
        assert write_error_text(err.value) == f"no space left on device in {mnt}"
        assert json.loads(target.read_text()) == {"old": 1}
        assert sorted(p.name for p in mnt.iterdir()) == ["sweep.json"]

        record = Record(sweep_id="s", point_id="abcdef012345", status="ok", metrics={"pad": "x" * 200_000})
        with pytest.raises(RecordNotWritten) as err:
            SweepDir(mnt).write_record(record)
        assert err.value.errno == errno.ENOSPC and err.value.record is record
        assert err.value.filename == str(mnt / POINTS_DIR / "abcdef012345" / RESULT_FILE)
        assert list((mnt / POINTS_DIR / "abcdef012345").iterdir()) == []


def test_full_disk_mid_sweep_is_reported_per_point_and_a_resume_finishes_the_grid(small_tmpfs, tmp_path):
    sweep_dir = small_tmpfs / "sweep"
    filler = small_tmpfs / "filler"
    fill = f"+callbacks=[{{_target_:tests.integration.test_faults_disk_and_driver.FillDisk,path:'{filler}',seed:1}}]"
    args = ["seed=0,1,2", "ranks_per_node=1", fill]

    # seed=0 is recorded; seed=1 fills the disk at its step 2 (its rank file, then its record, cannot be written);
    # seed=2 cannot even write its spec.json; the report cannot be written
    full = _run(args, sweep_dir, tmp_path)
    out = full.stdout + full.stderr
    print(out[-6000:])
    assert full.returncode == 3, out[-4000:]
    assert "Traceback" not in out, out[-4000:]
    assert filler.exists()
    _assert_records_sound(sweep_dir)
    recorded = _fingerprint(sweep_dir)
    assert len(recorded) == 1
    (first,) = [read_record(p) for p in _results(sweep_dir).values()]
    assert first.status == "ok" and first.spec["seed"] == 0
    lines = [ln for ln in full.stdout.splitlines() if "not recorded: no space left on device in " in ln]
    assert len(lines) == 2, full.stdout[-4000:]
    assert "seed=1" in lines[0] and "seed=2" in lines[1]
    assert f"{sweep_dir}/points/" in lines[0]
    assert "it ended error" in lines[0]  # seed=1 ran to its end (its rank could not write its file)
    assert f"report not written: no space left on device in {sweep_dir}" in full.stderr
    assert "Report:" not in full.stdout
    assert "exit status 3" in full.stderr

    # free the space: the resume runs seed=1 and seed=2 only, and writes the report
    filler.unlink()
    resumed = _run(args, sweep_dir, tmp_path)
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-4000:]
    assert resumed.stdout.strip().splitlines()[-1] == f"Report: {sweep_dir}/report.md"
    assert not filler.exists()  # the marker: seed=1 did not fill the disk again (the filler was deleted)
    _assert_records_sound(sweep_dir)
    _assert_recorded_once(sweep_dir, 3)
    after = _fingerprint(sweep_dir)
    assert {pid: after[pid] for pid in recorded} == recorded  # seed=0 was not run again
    assert sorted(read_record(p).status for p in _results(sweep_dir).values()) == ["ok", "ok", "ok"]


def _sweep_processes(sweep_dir: Path) -> list[str]:
    """The live processes (other than this one) of the sweep: those whose command line names the sweep directory
    (the driver, torchrun and fresh ranks, ``python -m sweeper.job.harness <sweep_dir>/points/<id>``) and those
    working in the driver's folder, the sweep directory's parent (the pre-flight worker, and the launch processes
    and ranks it forks, whose command line is the worker's)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "name", "cmdline", "status", "cwd"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            mine = str(sweep_dir) in cmdline or proc.info["cwd"] == str(sweep_dir.parent)
            if proc.pid != os.getpid() and mine and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(f"{proc.pid} {proc.info['name']}: {cmdline[:160]}")
        except psutil.Error:
            continue
    return found


def test_driver_killed_three_times_at_random_moments_then_resumed_records_every_point_once(tmp_path):
    sweep_dir = tmp_path / "sweep"
    args = ["seed=0,1,2"]  # 2 ranks per point (the default): orphaned ranks are really tested
    rng = random.Random(20261130)
    delays = [rng.randrange(20, 91) / 10 for _ in range(3)]  # seeded: 2-9 s, to 0.1 s (the 3 points: ~12 s)
    print(f"kill delays (s): {delays}")
    recorded: dict[str, tuple[str, int]] = {}
    for i, delay in enumerate(delays):
        with open(tmp_path / f"driver{i}.log", "w") as log:
            driver = subprocess.Popen(
                _cmd(args, sweep_dir),
                cwd=tmp_path,
                env=_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                driver.wait(timeout=delay)
                print(f"run {i}: finished before its kill at {delay} s (exit {driver.returncode})")
            except subprocess.TimeoutExpired:
                alive = _sweep_processes(sweep_dir)
                os.kill(driver.pid, signal.SIGKILL)  # the driver alone, not its process group
                driver.wait()
                ranks = sum("sweeper.job.harness" in p and "torch.distributed.run" not in p for p in alive)
                ranks += sum(" sweeper-rank" in p for p in alive)  # forked ranks: named, the worker's command line
                print(
                    f"run {i}: SIGKILL after {delay} s with {ranks} rank(s) running, {len(_results(sweep_dir))} recorded"
                )
        deadline = time.monotonic() + 5.0
        while (left := _sweep_processes(sweep_dir)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, f"run {i}: processes of the killed sweep survived it: {left}"
        _assert_records_sound(sweep_dir, tmp_files=False)  # a SIGKILL may land inside a write: its temp file stays
        now = _fingerprint(sweep_dir)
        assert {pid: now[pid] for pid in recorded} == recorded, f"run {i} ran a point that had a final record"
        recorded = now

    final = _run(args, sweep_dir, tmp_path)
    assert final.returncode == 0, (final.stdout + final.stderr)[-4000:]
    assert final.stdout.strip().splitlines()[-1] == f"Report: {sweep_dir}/report.md"
    _assert_records_sound(sweep_dir, tmp_files=False)
    _assert_recorded_once(sweep_dir, 3)
    now = _fingerprint(sweep_dir)
    assert {pid: now[pid] for pid in recorded} == recorded, "the last resume ran a point that had a final record"
    assert sorted(read_record(p).spec["seed"] for p in _results(sweep_dir).values()) == [0, 1, 2]
    assert all(read_record(p).status == "ok" for p in _results(sweep_dir).values())
