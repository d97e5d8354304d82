"""The MFU peak of an fp32 GPU point follows torch's TF32 setting without reading the legacy flag, which raises once
the new ``fp32_precision`` API was used (docs/cases.md#u22). Real torch, in a child process (the setting is global
state of the process); no GPU is needed to set or read it: the CPU build has the same backend flags."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import torch
from sweeper.job.harness import tf32_matmuls
torch.backends.cuda.matmul.fp32_precision = "tf32"
try:
    torch.backends.cuda.matmul.allow_tf32
    raise SystemExit("the legacy flag no longer raises: the test does not reproduce the case")
except RuntimeError:
    pass
assert tf32_matmuls() is True
torch.backends.cuda.matmul.fp32_precision = "ieee"
assert tf32_matmuls() is False
print("ok")
"""


def test_the_new_api_set_to_tf32_reads_as_tf32_where_the_legacy_flag_raises():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
