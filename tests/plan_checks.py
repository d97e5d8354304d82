"""Checks of the memory model against measured records, shared by the integration tests whose sweeps already run
the strategies (``test_sweep_zero``: DDP and ZeRO-1/2/3; ``test_sweep_fsdp_gc``: DDP and FSDP full_shard x gc), so
that checking the model costs no extra training run."""

from __future__ import annotations

from sweeper.capacity.arch import Arch
from sweeper.capacity.memory import estimate_memory
from sweeper.config.spec import PointSpec
from sweeper.results.record import Record

STATES_TOLERANCE = 0.02
PEAK_TOLERANCE = 0.15


def _label(r: Record) -> str:
    return " ".join(f"{k}={r.spec[k]}" for k in ("fsdp", "zero", "gc", "precision"))


def _rel(predicted: float, measured: float) -> float:
    return abs(predicted - measured) / measured


def assert_states_and_peak_predicted(records: list[Record]) -> None:
    """Every ok record: predicted parameter, gradient and optimizer-state bytes per rank within 2 % of the measured
    ones (gradients None under DeepSpeed on both sides: its gradients live in its own partitions), and the predicted
    CPU peak within 15 % of MemTracker's tensor-byte peak; the record's own ``predicted`` agrees with the model.

    Raises:
        AssertionError: listing every point and number out of bounds.
    """
    bad = []
    ok = [r for r in records if r.status == "ok"]
    assert ok, [r.reason for r in records]
    for r in ok:
        spec = PointSpec.from_dict(r.spec)
        est = estimate_memory(spec, Arch.from_config(spec.model_type, spec.model_config), "cpu")
        m, st = r.metrics, est.states
        pairs = {
            "param": (st.param_bytes, m["param_bytes_per_rank"]),
            "optimizer_state": (st.optimizer_state_bytes, m["optimizer_state_bytes_per_rank"]),
        }
        if spec.deepspeed:
            assert st.grad_bytes is None and m["grad_bytes_per_rank"] is None, _label(r)
        else:
            pairs["grad"] = (st.grad_bytes, m["grad_bytes_per_rank"])
        for what, (p, q) in pairs.items():
            if _rel(p, q) > STATES_TOLERANCE:
                bad.append(f"{_label(r)} {what}: predicted {p:,} measured {q:,}")
        assert m["peak_mem_kind"] == "cpu_tensor_bytes_memtracker", _label(r)
        if _rel(est.peak_bytes, m["peak_mem_bytes"]) > PEAK_TOLERANCE:
            bad.append(
                f"{_label(r)} peak: predicted {est.peak_bytes:,} ({est.peak_phase}) measured {m['peak_mem_bytes']:,}"
            )
        assert (r.predicted or {}).get("peak_bytes") == est.peak_bytes, _label(r)
    assert not bad, "\n".join(bad)
