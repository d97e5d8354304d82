"""This host's gloo cost, measured by real gloo processes (:mod:`sweeper.job.gloo_probe`) and cached for the time
model (:mod:`sweeper.capacity.hostcomm`), also when started from inside a torchrun rank (whose variables would point
the probe at the job's store)."""

from __future__ import annotations

import json

from sweeper.capacity.hostcomm import cached_comm, comm_key
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
