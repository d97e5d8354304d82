"""This host's gloo cost, measured by real gloo processes (:mod:`sweeper.job.gloo_probe`) and cached for the time
model (:mod:`sweeper.capacity.hostcomm`), also when started from inside a torchrun rank (whose variables would point
the probe at the job's store)."""

from __future__ import annotations

import json
import time

from sweeper.capacity.hostcomm import cached_comm, comm_key
from sweeper.job import gloo_probe
from sweeper.job.gloo_probe import _free_port as _real_free_port
from sweeper.job.gloo_probe import host_comm


def test_the_probe_measures_two_real_gloo_ranks_caches_them_and_ignores_torchruns_variables(tmp_path, monkeypatch):
    for k, v in {
        "RANK": "0",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
    }.items():
        monkeypatch.setenv(k, v)
    path = tmp_path / "gloo.json"
    comm = host_comm(2, path=path, now=1000.0)
    assert comm is not None, json.loads(path.read_text())
    assert comm.latency_s >= 0 and comm.bandwidth_gb_s > 0 and comm.dtensor_step_s >= 0
    # FSDP2's per-unit cost: measured, never negative (its formula: tests/unit/test_time_calibration.py); on a
    # loaded host the latency measured with it can explain the whole excess, so 0 is a measurement too
    assert comm.fsdp_unit_s >= 0 and comm.fsdp_unit_s < 0.1, comm
    assert comm.source.startswith("measured: gloo all_reduce/all_gather after compute, 2 local ranks")
    entry = json.loads(path.read_text())[comm_key(2)]
    assert entry["measured_at"] == 1000.0
    assert {"dtensor_step_s", "fsdp_unit_s"} <= set(entry)
    assert cached_comm(2, path, now=2000.0) == comm  # the driver's torch-free read
    assert host_comm(2, path=path, now=2000.0) == comm  # reused, not measured again
    assert host_comm(1, path=path) is None  # one rank: no collective


def test_a_probe_whose_port_is_taken_tries_once_more_on_a_fresh_port(tmp_path, monkeypatch):
    """Real ports, really taken: the first port the probe picks is held by another listening socket (the race
    :func:`_free_port` cannot close); rank 0 cannot listen there, the try ends at once and the second try measures."""
    from tests.integration.test_rendezvous_port import taken_port

    with taken_port() as port:
        picked = iter([port])
        monkeypatch.setattr(gloo_probe, "_free_port", lambda: next(picked, None) or _real_free_port())
        t0 = time.monotonic()
        comm = gloo_probe.host_comm(2, path=tmp_path / "gloo.json", now=1000.0)
    assert comm is not None and comm.bandwidth_gb_s > 0
    assert next(picked, None) is None  # the taken port was tried first
    assert time.monotonic() - t0 < 60  # the failed try did not wait out the 90 s timeout


def test_a_probe_that_fails_in_every_try_records_each_ranks_exception_not_only_its_last_line(tmp_path, monkeypatch):
    """Every port taken: the error recorded (and shown as why communication is not modelled) names each try's
    failing rank with the Python exception above the C++ runtime's last words; the rank waiting on the taken port
    is stopped, not waited for until the timeout."""
    from tests.integration.test_rendezvous_port import taken_port

    with taken_port() as port:
        monkeypatch.setattr(gloo_probe, "_free_port", lambda: port)
        t0 = time.monotonic()
        assert gloo_probe.host_comm(2, path=tmp_path / "gloo.json", now=1000.0) is None
        took = time.monotonic() - t0
    error = json.loads((tmp_path / "gloo.json").read_text())[f"{comm_key(2)}|failed"]["error"]
    assert error.startswith(f"gloo probe failed in {gloo_probe.ATTEMPTS} tries: "), error
    assert error.count(f"rank 0 exit 1 (port {port}): ") == gloo_probe.ATTEMPTS, error
    assert "failed to listen" in error or "EADDRINUSE" in error or "address already in use" in error.lower(), error
    assert took < 60, took


def test_the_zero_probe_times_a_real_deepspeed_zero2_step_against_plain_and_the_reader_costs_it(tmp_path, monkeypatch):
    """Two real gloo ranks, a real ``deepspeed.initialize`` with ZeRO stage 2: the raw step times are cached beside the
    gloo link, and the torch-free reader turns them into the per-tensor host cost at the link in force."""
    from sweeper.capacity.hostcomm import zero_key, zero_tensor_cost
    from sweeper.job import zero_probe

    monkeypatch.setenv("RANK", "0")  # as from inside a torchrun rank: the probe keeps to its own port
    path = tmp_path / "gloo.json"
    link = host_comm(2, path=path, now=1000.0)
    assert link is not None and link.zero_tensor_s is None  # no ZeRO point ran: not measured
    assert zero_probe.host_zero(2, path=path, now=1000.0)
    entry = json.loads(path.read_text())[zero_key(2)]
    assert entry["tensors"] == zero_probe.PROBE_TENSORS and entry["measured_at"] == 1000.0
    assert 0 < entry["plain_s"] < entry["zero2_s"] < 5, entry  # DeepSpeed's step communicates, the plain one does not
    assert entry["source"].startswith("measured: DeepSpeed ZeRO-2 step against plain, 2 local ranks"), entry
    got = cached_comm(2, path, now=2000.0)
    cost = zero_tensor_cost(entry["plain_s"], entry["zero2_s"], entry["tensors"], entry["tensor_bytes"], 2, link)
    assert got.zero_tensor_s == cost and 0 <= cost < 0.05, got
    assert zero_probe.host_zero(2, path=path, now=2000.0)  # cached: not measured again
    assert json.loads(path.read_text())[zero_key(2)]["measured_at"] == 1000.0
    assert not zero_probe.host_zero(1, path=path)  # one rank: no collective
