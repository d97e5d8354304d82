"""The environment a result was measured in: host, CPU, Python, library versions, SLURM job id.

Read from package metadata and /proc, without importing torch (the driver stays light).
"""

from __future__ import annotations

import functools
import os
import platform
import socket
from importlib import metadata
from pathlib import Path
from typing import Any

LIBRARIES = ("torch", "transformers", "accelerate", "deepspeed", "hydra-core", "submitit", "wandb")


@functools.cache
def library_versions() -> dict[str, str]:
    """Installed versions of the libraries a result depends on (read from package metadata once per process,
    no imports). Callers must not mutate the returned dict."""
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def environment() -> dict[str, Any]:
    """Host, Python, CPU and library versions; the SLURM job id when inside a SLURM job."""
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    env = {
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        **library_versions(),
    }
    job = slurm_job_id()
    if job:
        env["slurm_job_id"] = job
    return env


def slurm_job_id() -> str | None:
    """This process's SLURM job id as sacct names it (``<array>_<task>`` inside an array), or None outside SLURM."""
    if "SLURM_ARRAY_JOB_ID" in os.environ:
        return f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ.get('SLURM_ARRAY_TASK_ID')}"
    return os.environ.get("SLURM_JOB_ID")
