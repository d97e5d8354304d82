"""FLOPs per token and model FLOPs utilisation (MFU), PaLM convention.

MFU = achieved tokens/s per device x training FLOPs per token / peak FLOP/s of one device in the compute dtype
(Chowdhery et al. 2022, "PaLM", Appendix B). Recompute FLOPs of gradient checkpointing are *not* counted (counting
them gives HFU), so a checkpointed point shows a lower MFU for the same hardware work.

Peaks are dense (no sparsity) datasheet numbers keyed by device name and dtype. An unknown device gets no MFU and
a stated reason, never another chip's peak. On CPU the peak is *measured* (a matmul benchmark) and labelled so.
"""

from __future__ import annotations

from dataclasses import dataclass

# Dense peak FLOP/s per device by (name fragment, compute dtype). Sources: NVIDIA datasheets
# (A100: "NVIDIA A100 Tensor Core GPU" datasheet; H100/H200 SXM: "NVIDIA H100 Tensor Core GPU" datasheet,
# H200 shares H100 SXM's compute; the bf16/fp16 numbers are dense tensor-core, fp32 is the non-tensor-core rate).
# fp32 matmuls on these GPUs may run as TF32 when torch.backends.cuda.matmul.allow_tf32 is set; sweeper uses
# the plain fp32 peak unless TF32 is enabled (then "tf32").
_GPU_PEAKS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H200", {"bf16": 989.4e12, "fp16": 989.4e12, "tf32": 494.7e12, "fp32": 66.9e12}),
    ("H100 SXM", {"bf16": 989.4e12, "fp16": 989.4e12, "tf32": 494.7e12, "fp32": 66.9e12}),
    ("H100 80GB HBM3", {"bf16": 989.4e12, "fp16": 989.4e12, "tf32": 494.7e12, "fp32": 66.9e12}),
    ("H100 PCIe", {"bf16": 756.5e12, "fp16": 756.5e12, "tf32": 378e12, "fp32": 51.2e12}),
    ("H100 NVL", {"bf16": 835.5e12, "fp16": 835.5e12, "tf32": 417.5e12, "fp32": 60e12}),
    ("A100", {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12}),
    ("L40S", {"bf16": 362.05e12, "fp16": 362.05e12, "tf32": 183e12, "fp32": 91.6e12}),
    ("A10G", {"bf16": 70e12, "fp16": 70e12, "tf32": 35e12, "fp32": 31.2e12}),
    ("V100", {"fp16": 125e12, "fp32": 15.7e12}),
)


@dataclass(frozen=True)
class Peak:
    """Peak FLOP/s of one device in one dtype, or None with the reason there is none.

    Attributes:
        flops: FLOP/s (not TFLOP/s), or None.
        source: where the number comes from ("datasheet: H100 SXM bf16 dense", "measured: ...").
    """

    flops: float | None
    source: str


def gpu_peak(device_name: str, dtype: str) -> Peak:
    """Datasheet peak of a GPU by its CUDA device name (``torch.cuda.get_device_name()``) and compute dtype.

    Args:
        device_name: e.g. "NVIDIA H100 80GB HBM3".
        dtype: one of "fp32", "tf32", "bf16", "fp16".

    Returns:
        A :class:`Peak`; ``flops`` is None for an unknown device or a dtype the device has no number for.
    """
    for fragment, table in _GPU_PEAKS:
        if fragment.lower() in device_name.lower():
            if dtype in table:
                return Peak(table[dtype], f"datasheet: {fragment} {dtype} dense")
            return Peak(None, f"no {dtype} peak known for {fragment}")
    return Peak(None, f"unknown device {device_name!r}: no datasheet peak, so no MFU")


def gpu_model(device_name: str) -> str | None:
    """The datasheet catalogue's name of a GPU (``"H100 80GB HBM3"``) for a CUDA device name or a cluster's
    ``gpu_name``, as :func:`gpu_peak` matches it; None for a device the catalogue does not hold."""
    for fragment, _ in _GPU_PEAKS:
        if fragment.lower() in device_name.lower():
            return fragment
    return None


def flops_per_token(non_embedding_params: int, num_layers: int, num_heads: int, head_dim: int, seq_len: int) -> float:
    """Training FLOPs per token, PaLM Appendix B: ``6·N + 12·L·a·d·s``.

    Args:
        non_embedding_params: N, parameters minus the input token embedding (the output projection counts).
        num_layers: L. num_heads: a. head_dim: d. seq_len: s, tokens per sample.

    Returns:
        FLOPs per trained token (forward + backward, no recompute).
    """
    return 6.0 * non_embedding_params + 12.0 * num_layers * num_heads * head_dim * seq_len


def mfu(tokens_per_s_per_device: float, flops_per_tok: float, peak: Peak) -> float | None:
    """MFU as a fraction (0.42 = 42 %), or None when the peak is unknown."""
    if peak.flops is None or peak.flops <= 0:
        return None
    return tokens_per_s_per_device * flops_per_tok / peak.flops
