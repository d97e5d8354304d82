"""What the target hardware can run under a truthful label (status ``unsupported``).

Facts measured with the pinned libraries (``docs/measurement.md``): a point that would run something else than its
label on this hardware is refused with the reason, never run under a false label. :mod:`sweeper.job.verify`
catches anything these rules miss, after the first step.
"""

from __future__ import annotations

from sweeper.config.spec import PointSpec
from sweeper.config.target import Target
from sweeper.point.gate import rule
from sweeper.point.library_args import fsdp_key, truth

# GPUs without bf16 (compute capability < 8.0), by name fragment (docs/cases.md#p04).
NO_BF16_GPUS = ("V100", "T4", "P100", "P40", "K80", "TITAN V", "RTX 20")


@rule(
    "H01",
    ("precision", "device"),
    "fp16 on CPU would silently train fp32",
    "accelerate (fp16 autocast only on accelerators); DeepSpeed refuses fp16 on CPU",
    status="unsupported",
)
def _fp16_cpu(spec: PointSpec, target: Target):
    if target.device_type == "cpu" and spec.precision == "fp16":
        return (
            "precision=fp16 on CPU: accelerate enables fp16 autocast only on accelerators (it would silently "
            "train fp32) and DeepSpeed refuses fp16 on CPU; run fp16 on a GPU, or use precision=bf16 here",
            ("precision", "device"),
        )
    return None


@rule(
    "H02",
    ("fsdp", "device"),
    "hybrid_shard runs only with FSDP1, which has no CPU support",
    "transformers FSDP integration",
    status="unsupported",
)
def _hybrid_cpu(spec: PointSpec, target: Target):
    if target.device_type == "cpu" and spec.fsdp == "hybrid_shard":
        return (
            "fsdp=hybrid_shard on CPU: transformers runs hybrid_shard only with FSDP1, which has no CPU "
            "support; run it on GPUs, or use full_shard here",
            ("fsdp", "device"),
        )
    return None


@rule(
    "H03",
    ("precision", "cluster.gpu_name"),
    "bf16 needs compute capability 8.0 (Ampere) or newer",
    "docs/cases.md#p04",
    status="unsupported",
)
def _bf16_old_gpu(spec: PointSpec, target: Target):
    name = target.gpu_name or ""
    if (
        target.device_type == "cuda"
        and spec.precision == "bf16"
        and any(f.lower() in name.lower() for f in NO_BF16_GPUS)
    ):
        return (
            f"precision=bf16 on {name}: bf16 needs compute capability 8.0 (Ampere) or newer",
            ("precision", "cluster.gpu_name"),
        )
    return None


@rule(
    "H04",
    ("fsdp_config.cpu_offload", "device"),
    "FSDP parameter offload to the CPU needs an accelerator to offload from",
    "FSDP2 CPUOffloadPolicy pins host memory, which needs an accelerator ('Cannot access accelerator device when "
    "none is available' on a CPU-only machine, seen with torch 2.13)",
    status="unsupported",
)
def _cpu_offload_on_cpu(spec: PointSpec, target: Target):
    offload = {k: v for k, v in spec.fsdp_config.items() if fsdp_key(k) in ("cpu_offload", "offload_params")}
    if target.device_type == "cpu" and spec.fsdp != "none" and any(truth(v) is True for v in offload.values()):
        keys = tuple(f"fsdp_config.{k}" for k in offload)
        return (
            f"{', '.join(keys)}=true on CPU: FSDP offloads parameters from an accelerator to host memory, and its "
            "pinned host buffers need an accelerator; run it on GPUs, or drop the key here",
            (*keys, "device"),
        )
    return None
