"""Skipped optimizer steps of fp16 dynamic loss scaling, as a callback sees them after a step (read by
:class:`sweeper.job.timing.StepTimer` outside every step's clock; docs/measurement.md, "Skipped optimizer steps")."""

from __future__ import annotations

from typing import Any

__all__ = ["loss_scale", "step_was_skipped"]


def loss_scale(optimizer: Any) -> float | None:
    """The current loss scale of fp16 dynamic loss scaling: the ``GradScaler`` accelerate put in its optimizer wrapper
    (``AcceleratedOptimizer.scaler``), or None without one (bf16, fp32, DeepSpeed). On CUDA it reads a device
    scalar (a synchronisation): called only outside a timed step's clock."""
    scaler = getattr(optimizer, "scaler", None)
    if scaler is None or not getattr(scaler, "is_enabled", lambda: False)():
        return None
    return float(scaler.get_scale())


def step_was_skipped(optimizer: Any, scale_before: float | None = None, scale_after: float | None = None) -> bool:
    """Whether the optimizer step that just ran skipped its update (fp16 dynamic loss scaling found inf/NaN
    gradients): accelerate's ``AcceleratedOptimizer.step_was_skipped`` (what the Trainer's
    ``accelerator.optimizer_step_was_skipped`` reads; under DeepSpeed its wrapper's, the engine's ``overflow``), or
    the loss scale (:func:`loss_scale`) lower after the step than before it.

    The second test is needed: an optimizer that takes the scaler into its own step (``_step_supports_amp_scaling``,
    the fused AdamW that transformers 5 uses by default with torch >= 2.8) is always called by
    ``GradScaler.step`` and skips the update inside its kernel, so accelerate, which watches whether the step was
    called, reports no skip; the scaler still backs its scale off (``GradScaler.update``), and a scale only ever
    falls on an overflow. False for an optimizer without either (no loss scaling)."""
    if bool(getattr(optimizer, "step_was_skipped", False)):
        return True
    return scale_before is not None and scale_after is not None and scale_after < scale_before
