"""TrainerCallbacks that inject failures into real training runs, passed with sweeper's ``callbacks`` key.

Only what cannot happen on this machine is faked, and the names say so: there is no GPU here, so a CUDA OOM is a
real ``torch.OutOfMemoryError`` raised with a real CUDA message (``FakeGpuOom``). Everything else is real: a rank
that really hangs in a collective, a rank that really gets SIGKILL.
"""

from __future__ import annotations

import os
import signal
import time

import torch
from transformers import TrainerCallback

# The seed message of shared/cases/public.md (one line in reality).
SEED_OOM = (
    "CUDA out of memory. Tried to allocate 340.00 MiB. GPU 1 has a total capacity of 94.97 GiB of which 17.69 MiB "
    "is free. Including non-PyTorch memory, this process has 94.95 GiB memory in use. Of the allocated memory "
    "86.44 GiB is allocated by PyTorch, and 7.53 GiB is reserved by PyTorch but unallocated. If reserved but "
    "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation."
)


def _mine(rank: int | None) -> bool:
    return rank is None or int(os.environ.get("RANK", "0")) == rank


class FakeGpuOom(TrainerCallback):
    """Raise ``torch.OutOfMemoryError(SEED_OOM)`` on ``rank`` at optimizer step ``at_step`` (training), or at
    the first evaluation batch when ``in_eval`` (case P05)."""

    def __init__(self, at_step: int = 2, rank: int | None = 1, in_eval: bool = False) -> None:
        self.at_step, self.rank, self.in_eval = at_step, rank, in_eval

    def on_step_begin(self, args, state, control, **kwargs):
        if not self.in_eval and state.global_step == self.at_step and _mine(self.rank):
            raise torch.OutOfMemoryError(SEED_OOM)

    def on_prediction_step(self, args, state, control, **kwargs):
        if self.in_eval and _mine(self.rank):
            raise torch.OutOfMemoryError(SEED_OOM)


class HangRank(TrainerCallback):
    """Rank ``rank`` stops answering at step ``at_step`` (sleeps), so the other ranks block in a collective."""

    def __init__(self, at_step: int = 2, rank: int = 1) -> None:
        self.at_step, self.rank = at_step, rank

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.at_step and _mine(self.rank):
            time.sleep(3600)


class KillRank(TrainerCallback):
    """Rank ``rank`` is killed with SIGKILL at step ``at_step`` (as the host OOM killer would)."""

    def __init__(self, at_step: int = 2, rank: int = 1) -> None:
        self.at_step, self.rank = at_step, rank

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.at_step and _mine(self.rank):
            os.kill(os.getpid(), signal.SIGKILL)


class StopRankEarly(TrainerCallback):
    """Rank ``rank`` alone stops training after optimizer step ``at_step`` (``control.should_training_stop``), as a
    callback with a per-rank condition does (speechbrain#1939, case T07): it leaves ``train()`` normally with fewer
    steps than asked, and the other ranks' next collective fails."""

    def __init__(self, at_step: int = 4, rank: int = 1) -> None:
        self.at_step, self.rank = at_step, rank

    def on_step_end(self, args, state, control, **kwargs):
        # global_step counts the optimizer steps finished, this one included
        if state.global_step == self.at_step and _mine(self.rank):
            control.should_training_stop = True


class FakeActivationOnOneRank(TrainerCallback):
    """Rank ``rank`` alone holds ``bytes_per_sample`` x the batch more tensor bytes from the middle of each forward
    (a pre-hook on decoder layer ``layer``) to the end of the step: a fake per-rank activation, so that only this rank
    crosses a device budget, mid-step, while the other ranks go on into the step's collectives."""

    def __init__(self, bytes_per_sample: int, rank: int = 1, layer: int = 1) -> None:
        self.bytes_per_sample, self.rank, self.layer = bytes_per_sample, rank, layer
        self.batch = 0
        self.held: list[torch.Tensor] = []

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not _mine(self.rank):
            return
        self.batch = args.per_device_train_batch_size
        layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
        layers[self.layer].register_forward_pre_hook(self._hold)

    def _hold(self, module, args):
        self.held.append(torch.empty(self.batch * self.bytes_per_sample, dtype=torch.uint8))

    def on_step_end(self, args, state, control, **kwargs):
        self.held.clear()


class ExpectSecrets(TrainerCallback):
    """Not a fault: checks, inside each rank, that the secrets given on the command line reached the libraries as
    their real values (sweeper keeps them as environment references until then, ``sweeper.redact``). ``api_key``
    is this callback's own secret argument; ``key_digest`` and ``hub_digest`` are the SHA-256 hex of the
    expected values (the test never writes a secret itself). Raises at the first step on a mismatch."""

    def __init__(self, api_key: str = "", key_digest: str = "", hub_digest: str = "") -> None:
        self.api_key, self.key_digest, self.hub_digest = api_key, key_digest, hub_digest

    def on_train_begin(self, args, state, control, **kwargs):
        import hashlib

        def digest(value: object) -> str:
            return hashlib.sha256(str(value).encode()).hexdigest()

        if self.key_digest and digest(self.api_key) != self.key_digest:
            raise RuntimeError("ExpectSecrets: the callback's api_key is not the value given")
        if self.hub_digest and digest(args.hub_token) != self.hub_digest:
            raise RuntimeError("ExpectSecrets: TrainingArguments.hub_token is not the value given")


class FakeGpuFp16Overflow(TrainerCallback):
    """fp16 dynamic loss scaling's skipped step, on CPU: what only a GPU gives is faked, the skip itself is real.

    accelerate hands fp16 training a ``GradScaler`` on accelerators only (and sweeper's gate refuses fp16 on CPU,
    H01), so at train begin this installs a real ``torch.amp.GradScaler("cpu")`` (``init_scale=1.0``: the loss is
    not scaled here) in the Trainer's prepared optimizer, exactly as ``AcceleratedOptimizer.__init__`` does for a
    scaler (accelerate's own ``patch_optimizer_step``). At optimizer step ``at_step`` a gradient hook makes one
    parameter's gradient inf: the real scaler finds it, the update is skipped (inside the fused AdamW kernel, the
    Trainer's default optimizer) and the scaler backs its scale off, as when fp16 overflows on a GPU.
    """

    def __init__(self, at_step: int = 4) -> None:
        self.at_step = at_step
        self._handle = None

    def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
        from accelerate.optimizer import patch_optimizer_step

        optimizer.scaler = torch.amp.GradScaler("cpu", init_scale=1.0)
        optimizer.scaler.scale(torch.ones(()))  # its scale tensor, made by the first scale() (the loss on a GPU)
        optimizer._accelerate_step_called = False
        optimizer._optimizer_original_step_method = optimizer.optimizer.step
        optimizer._optimizer_patched_step_method = patch_optimizer_step(optimizer, optimizer.optimizer.step)

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        if state.global_step == self.at_step:
            p = next(q for q in model.parameters() if q.requires_grad)
            self._handle = p.register_hook(lambda g: torch.full_like(g, float("inf")))

    def on_step_end(self, args, state, control, **kwargs):
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


class SlowFirstArrayTask(TrainerCallback):
    """Holds the first task of a SLURM job array of several tasks ``seconds`` longer at the end of training (after
    every measured window, before the rank's record), so that the tasks of one submission end at different times
    (real jobs of equal size end within the search's poll interval of each other)."""

    def __init__(self, seconds: float = 8.0) -> None:
        self.seconds = seconds

    def on_train_end(self, args, state, control, **kwargs):
        first = os.environ.get("SLURM_ARRAY_TASK_ID") == os.environ.get("SLURM_ARRAY_TASK_MIN", "0")
        if first and int(os.environ.get("SLURM_ARRAY_TASK_COUNT", "1")) > 1:
            time.sleep(self.seconds)
