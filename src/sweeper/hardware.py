"""What the target hardware can run: rules checked before a point launches (status ``unsupported``).

These are facts measured with the pinned libraries (``shared/notes/cpu-backend.md``): a point that would run
something else than its label on this hardware is refused with the reason, never run under a false label.
:mod:`sweeper.verify` catches anything these rules miss, after the first step.
"""

from __future__ import annotations

from pathlib import Path

from sweeper.spec import PointSpec

# GPUs without bf16 (compute capability < 8.0), by name fragment (case P04).
_NO_BF16_GPUS = ("V100", "T4", "P100", "P40", "K80", "TITAN V", "RTX 20")


def local_device_type(requested: str) -> str:
    """``cuda`` or ``cpu``: what ``device=auto|cpu|cuda`` resolves to on this machine, without importing torch
    (an NVIDIA driver exposes ``/proc/driver/nvidia/gpus/<bus id>``)."""
    if requested != "auto":
        return requested
    gpus = Path("/proc/driver/nvidia/gpus")
    return "cuda" if gpus.is_dir() and any(gpus.iterdir()) else "cpu"


def unsupported_reason(spec: PointSpec, device_type: str, gpu_name: str | None = None) -> str | None:
    """Why this point cannot truly run on ``device_type`` (``cpu``/``cuda``; ``gpu_name`` from the cluster config
    or the device), or None when it can."""
    if device_type == "cpu":
        if spec.precision == "fp16":
            return (
                "precision=fp16 on CPU: accelerate enables fp16 autocast only on accelerators (it would silently "
                "train fp32) and DeepSpeed refuses fp16 on CPU; run fp16 on a GPU, or use precision=bf16 here"
            )
        if spec.fsdp == "hybrid_shard":
            return (
                "fsdp=hybrid_shard on CPU: transformers runs hybrid_shard only with FSDP1, which has no CPU "
                "support; run it on GPUs, or use full_shard here"
            )
    if device_type == "cuda" and gpu_name and spec.precision == "bf16":
        if any(f.lower() in gpu_name.lower() for f in _NO_BF16_GPUS):
            return f"precision=bf16 on {gpu_name}: bf16 needs compute capability 8.0 (Ampere) or newer"
    return None
