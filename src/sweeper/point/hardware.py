"""What device a local point runs on, read without importing torch."""

from __future__ import annotations

from pathlib import Path


def local_device_type(requested: str) -> str:
    """``cuda`` or ``cpu``: what ``device=auto|cpu|cuda`` resolves to on this machine, without importing torch
    (an NVIDIA driver exposes ``/proc/driver/nvidia/gpus/<bus id>``)."""
    if requested != "auto":
        return requested
    gpus = Path("/proc/driver/nvidia/gpus")
    return "cuda" if gpus.is_dir() and any(gpus.iterdir()) else "cpu"
