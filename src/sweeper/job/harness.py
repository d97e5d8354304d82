"""Every rank's entry point, ``python -m sweeper.job.harness [--mode=search] <point_dir>`` (started by torchrun;
on SLURM, :mod:`sweeper.launchers.slurm.in_job` calls :func:`run_rank`), and the measured run of a point.

The life every rank shares (orphan guard, setup, error handling, rank-file write) is :mod:`sweeper.job.rank`; the
mode is what the rank runs: ``measure`` (the default, :func:`run_rank`) or ``search`` (the trials of
``per_device_batch_size=auto``, :func:`sweeper.job.batch_trials.run_search`).

The measured run reads ``<point_dir>/spec.json`` (with ``per_device_batch_size=auto``, the batch comes from the
finished search, :func:`sweeper.point.batch_search.searched_batch`) and the device budget
(:mod:`sweeper.point.device_budget`: on CPU enforced in the warm-up and memory windows, :mod:`sweeper.job.budget`),
builds the model and synthetic data, sets up the Trainer, runs warm-up + timed + memory + profiled steps (see
:mod:`sweeper.job.timing` and :mod:`sweeper.job.memory`; with ``timed_steps=auto`` the timed window ends when the
median step time is known well enough and the Trainer's ``max_steps`` counts it at its cap), verifies the labels
(see :mod:`sweeper.job.verify`) and writes ``<point_dir>/rank<r>.json`` atomically: raw measurements, or the raw
exception (type, message, traceback, phase, step). While training it keeps ``<point_dir>/rank<r>.step`` (optimizer
steps finished) up to date, so that a rank killed by a signal still tells at which step it died. Both files are
described in :mod:`sweeper.results.rankfile`. Each of sweeper's own measuring callbacks and each part of the rank
file after training is a site of :mod:`sweeper.job.faults`: a fault there is contained (the point stays ok, the
measurement missing with a note) or attributed ``internal`` (the step times kept), never the user's error. The
driver (:func:`sweeper.point.lifecycle.finish`) merges the rank files into the point's result record and classifies
failures; a rank never decides the point's status alone.
"""

from __future__ import annotations

import math
import resource
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from sweeper.config.spec import PointSpec
from sweeper.job import faults
from sweeper.job import rank as life
from sweeper.results.rankfile import STEP_FILE, RankFile, RankMemory, RankPeak, write_rank_step
from sweeper.results.stats import stop_rule

__all__ = ["LossLog", "StepProgress", "main", "model_flops_inputs", "run_rank"]


class StepProgress(TrainerCallback):
    """Keeps ``<point_dir>/rank<r>.step`` equal to the optimizer steps this rank has finished.

    Written at train begin (``state.global_step``, 0 for a fresh run) and at every ``on_step_end``; a failed write
    (``OSError``) is skipped, it never fails the rank. It must sit after :class:`sweeper.job.timing.StepTimer` in
    the callback list: the timer stops its clock in its own ``on_step_end`` and starts the next one in
    ``on_step_begin``, so this write falls between two timed windows.

    Attributes:
        steps: optimizer steps finished (``None`` until training begins).
    """

    def __init__(self, point_dir: Path, rank: int) -> None:
        self.point_dir = Path(point_dir)
        self.rank = rank
        self.steps: int | None = None

    def _write(self, step: int) -> None:
        self.steps = step
        try:
            write_rank_step(self.point_dir, self.rank, step)
        except OSError:
            pass  # a progress marker: a failed write must not fail the measurement (the rank file says the rest)

    def on_train_begin(self, args, state, control, **kwargs):
        self._write(state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        self._write(state.global_step)  # global_step was incremented just before on_step_end


class LossLog(TrainerCallback):
    """Training losses as logged by the Trainer (one per optimizer step with ``logging_steps=1``, which
    :func:`sweeper.point.library_args.sweeper_training_args` sets; the Trainer logs after ``on_step_end``, outside
    the timed window).

    Attributes:
        losses: each logged training loss (the mean over ranks of the steps since the last log).
        steps: for each entry of :attr:`losses`, the optimizer step it was logged at (1-based ``global_step``).
        learning_rates: for each entry of :attr:`losses`, the Trainer's logged ``learning_rate`` (None when it
            logged none).
        grad_norms: for each entry of :attr:`losses`, the Trainer's logged ``grad_norm``, the total gradient norm
            before clipping (None when it logged none: ``max_grad_norm=0``, or an engine that does not report it).
    """

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.steps: list[int] = []
        self.learning_rates: list[float | None] = []
        self.grad_norms: list[float | None] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(float(logs["loss"]))
            self.steps.append(int(state.global_step))
            self.learning_rates.append(_number(logs.get("learning_rate")))
            self.grad_norms.append(_number(logs.get("grad_norm")))


def _number(value: Any) -> float | None:
    """A logged value as a finite float, else None (missing, not a number, NaN or infinite)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def model_flops_inputs(model: Any) -> dict[str, int]:
    """The numbers :func:`sweeper.results.mfu.flops_per_token` needs, read off an unwrapped HF model.

    ``non_embedding_params`` = unique parameters minus the input token embedding; with tied embeddings the
    output projection still does its matmul, so it is added back; a mixture of experts counts only the
    ``num_experts_per_tok`` experts a token uses (the FLOPs it does).
    """
    cfg = model.config
    total = sum(p.numel() for p in model.parameters())
    emb = model.get_input_embeddings().weight
    out = model.get_output_embeddings()
    tied = out is not None and out.weight is emb
    layers = getattr(cfg, "num_hidden_layers", None) or cfg.n_layer
    heads = getattr(cfg, "num_attention_heads", None) or cfg.n_head
    hidden = getattr(cfg, "hidden_size", None) or cfg.n_embd
    head_dim = getattr(cfg, "head_dim", None) or hidden // heads
    non_embedding = total - emb.numel() + (emb.numel() if tied else 0)
    # a mixture of experts computes with num_experts_per_tok of its experts per token: the idle experts' parameters
    # are not in 6N (as sweeper.capacity.arch.Arch.active_params; otherwise MFU counted every expert's matmuls)
    experts = getattr(cfg, "num_local_experts", None) or getattr(cfg, "num_experts", None)
    top_k = getattr(cfg, "num_experts_per_tok", None)
    if experts and top_k:
        expert_params = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
        non_embedding -= expert_params * (int(experts) - int(top_k)) // int(experts)
    return {
        "param_count": total,
        "non_embedding_params": non_embedding,
        "num_layers": int(layers),
        "num_heads": int(heads),
        "head_dim": int(head_dim),
    }


def run_rank(point_dir: Path) -> int:
    """Run this rank's part of a measured point (the mode ``measure``) and write its rank file, the measurements
    or the failure. Returns the process exit code (0: ok, 1: failed).

    ``spec.json``, the search's answer and the device budget are read as the site ``rank-spec``
    (:meth:`sweeper.job.rank.Rank.read_input`): a fault there is the rank file's failure, ``internal``.
    """
    import torch

    from sweeper.job.budget import apply_gpu_budget
    from sweeper.job.jit_locks import before_build
    from sweeper.job.memory import BudgetWindow, MemoryWindow
    from sweeper.job.timing import ProfilerWindow, StepTimer, Windows
    from sweeper.job.trainer_run import TrainerRunLog, num_parameters
    from sweeper.job.trainer_setup import (
        SweeperTrainer,
        SyntheticTokens,
        build_model,
        init_sequence_parallel,
        training_arguments,
    )
    from sweeper.job.verify import DtypeProbe, LabelCheck
    from sweeper.point.batch_search import searched_batch
    from sweeper.point.device_budget import read_budget

    me = life.Rank(point_dir)
    point_dir = me.point_dir

    def inputs() -> tuple[PointSpec, int | None]:
        spec = me.spec
        if spec.batch_search:  # per_device_batch_size=auto: measure at the batch the search found (batch-search.md)
            spec = spec.with_batch(searched_batch(point_dir))
        return spec, read_budget(point_dir)  # device memory per rank (cluster.gpu_mem_gib), enforced on CPU too

    read = me.read_input(inputs) if me.ok else None
    if read is None:
        return me.write_unmeasured()
    spec, budget = read
    rank, use_cuda = me.rank, me.use_cuda
    out = me.header()
    phase = life.PhaseTracker()
    # sweeper's own measurement code: each callback a site, contained (notes) or attributed (sweeper.job.faults)
    notes = faults.Degradations(lambda: phase.step)
    # timed_steps=auto: spec.timed_steps is the cap; the timer ends the window earlier (sweeper.job.timing.Windows)
    windows = Windows(spec.warmup_steps, spec.timed_window, spec.memory_steps, spec.profile_steps, stop_rule(spec))
    timer = StepTimer(windows, use_cuda, notes)
    memory = MemoryWindow(windows, use_cuda, budget)
    limits = [BudgetWindow(range(spec.warmup_steps), budget)] if budget and spec.warmup_steps and not use_cuda else []
    profiler = ProfilerWindow(windows, use_cuda, point_dir, rank, spec.profile_trace)
    probe = DtypeProbe()
    losses = LossLog()
    check = LabelCheck(spec, probe)
    progress = StepProgress(point_dir, rank)
    guard = faults.guard_callback
    own = [
        guard(phase, "phase"),
        guard(check, "verify"),
        *(guard(b, "budget") for b in limits),
        guard(timer, "timing"),
        guard(progress, "progress", notes),
        guard(memory, "memory", notes, memory.abandon),
        guard(profiler, "profiler", notes, profiler.abandon),
        guard(losses, "losses", notes),
    ]
    (point_dir / STEP_FILE.format(rank=rank)).unlink(missing_ok=True)  # an earlier attempt's progress
    t_start = time.perf_counter()

    def measure() -> None:
        before_build(
            spec.zero, point_dir, rank, spec.timeout_s
        )  # a stale DeepSpeed JIT-build lock: removed, never waited on
        if use_cuda and budget:
            apply_gpu_budget(budget)
        torch.manual_seed(spec.seed)
        model = build_model(spec)
        shape = notes.value("model-shape", lambda: model_flops_inputs(model), None)
        # what HF's WandbCallback would log of this run, for the point's W&B run (rank 0 writes it)
        run_log = TrainerRunLog(point_dir, notes.value("trainer-run", lambda: num_parameters(model), None, 0))
        if shape is not None:
            out["model"] = shape
            check.unsharded_params = shape["param_count"]
        with faults.attributed("verify"):
            probe.attach(model)
        init_sequence_parallel(spec, use_cuda)
        mapping = partial(faults.attributed, "trainer-args")
        args = training_arguments(spec, str(point_dir / "trainer"), use_cpu=not use_cuda, own=mapping)
        vocab = model.config.vocab_size
        # one batch per data-parallel rank and step (a TP group shares one): the same samples, in the same shuffled
        # order, as any point of the same global batch, whatever its tp
        n_train = spec.per_device_batch_size * spec.grad_accum * spec.dp * spec.total_steps
        # progress right after the timer: its file write falls between two timed windows (see StepProgress)
        callbacks = [*own, guard(run_log, "trainer-run", notes), *life.user_callbacks(spec)]
        trainer = SweeperTrainer(
            model=model,
            args=args,
            train_dataset=SyntheticTokens(n_train, spec.seq_len, vocab, spec.seed, position_ids=spec.sp > 1),
            eval_dataset=SyntheticTokens(spec.per_device_batch_size * spec.dp * 2, spec.seq_len, vocab, spec.seed + 1)
            if spec.eval
            else None,
            callbacks=callbacks,
        )
        check.trainer = trainer
        if use_cuda:
            torch.cuda.reset_peak_memory_stats()
        trainer.train()
        if spec.eval:
            phase.phase = "eval"
            out["eval"] = trainer.evaluate()

    me.attempt(measure, phase)
    fields: RankFile = {"train_wall_s": time.perf_counter() - t_start}
    # everything after training runs inside the rank's error handling too (its first failure is kept), each part
    # contained: a fault of sweeper's own there loses that part only, never the step times
    parts = _Parts(windows, timer, memory, profiler, losses, progress, check, notes)
    me.attempt(lambda: _rank_fields(fields, me, spec, parts), phase)
    fields["harness_faults"] = notes.notes
    return me.write(out, fields)


@dataclass
class _Parts:
    """The measuring callbacks of one rank (:func:`run_rank`), for :func:`_rank_fields`."""

    windows: Any
    timer: Any
    memory: Any
    profiler: Any
    losses: LossLog
    progress: StepProgress
    check: Any
    notes: faults.Degradations


def _rank_fields(fields: RankFile, me: life.Rank, spec: PointSpec, parts: _Parts) -> None:
    """Fill ``fields`` (the rank file's measurements) after training, each part a contained site
    (``rank-fields``, ``peak``, ``host-comm``): the step times first, so that nothing after them can lose them."""
    import torch

    windows, timer, memory, profiler, losses, notes = (
        parts.windows,
        parts.timer,
        parts.memory,
        parts.profiler,
        parts.losses,
        parts.notes,
    )
    fields["step_times_s"] = timer.times_s
    fields["skipped_timed_steps"] = timer.skipped_timed
    # the progress marker off after a fault of its own: the timer counted every finished step as well
    fields["steps_completed"] = len(timer.wall_s) if notes.failed("progress") else parts.progress.steps
    fields["setup"] = parts.check.setup
    # [start, stop) 0-based step indices of the timed window; stop None when it never ended (auto, left early)
    fields["timed_window"] = [windows.timed.start, windows.timed.stop if windows.decided else None]
    fields["timed_stop"] = windows.stop_reason
    fields["schedstat"] = notes.value("rank-fields", timer.contention, {})  # sweeper.results.metrics
    fields["losses"] = losses.losses
    fields["series"] = {  # per-step history, every window (sweeper.results.metrics.series_from_ranks merges it)
        "step_wall_s": timer.wall_s,
        "mem_high_water_bytes": timer.mem_high_water_bytes,
        "mem_kind": timer.mem_kind,
        "loss_steps": losses.steps,
        "learning_rate": losses.learning_rates,
        "grad_norm": losses.grad_norms,
        "optimizer_step_skipped": timer.skipped,
    }
    mem: RankMemory = {
        "tensor_peak_bytes": memory.peak_bytes,
        "tensor_peak_breakdown_bytes": memory.breakdown_bytes,
        **memory.state_bytes,
    }
    rss = notes.value("rank-fields", lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, None)
    if rss is not None:
        mem["rss_peak_bytes"] = rss
    if me.use_cuda:

        def cuda_fields() -> None:
            mem["cuda_peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
            mem["cuda_peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
            fields["device_name"] = torch.cuda.get_device_name()

        notes.run("rank-fields", cuda_fields)
    fields["memory"] = mem
    fields["artifacts"] = profiler.artifacts
    if me.rank == 0 and me.ok:
        try:
            faults.inject("peak")
            fields["peak"] = _peak(spec, me.use_cuda, fields.get("device_name", ""))
        except Exception as e:  # noqa: BLE001 - the point trained: a fault in the MFU peak never loses it
            notes.keep("peak", e)
            fields["peak"] = {"flops": None, "source": f"no peak: {type(e).__name__}: {e}"[:300]}
        if not me.use_cuda and spec.nodes == 1 and spec.ranks_per_node > 1:
            from sweeper.job.gloo_probe import host_comm  # gloo's cost between local ranks, cached for the driver's

            # prediction (sweeper.capacity.hostcomm); apart from the peak: neither loses the other
            notes.run("host-comm", lambda: host_comm(spec.ranks_per_node))
            if spec.zero in (1, 2):  # DeepSpeed's host cost, once its CPU op is built (by this point's ranks)
                from sweeper.job.zero_probe import host_zero

                notes.run("host-comm", lambda: host_zero(spec.ranks_per_node))


def tf32_matmuls() -> bool:
    """Whether fp32 CUDA matmuls run as TF32 now, read through torch's ``fp32_precision`` API (``tf32``, ``ieee``,
    or ``none`` = the global ``torch.backends.fp32_precision``). The legacy ``torch.backends.cuda.matmul.allow_tf32``
    raises once the new API was used (transformers' ``tf32=True`` and ``torch_compile`` use it; docs/cases.md#u22), so
    it is read only where the new API does not exist."""
    import torch

    matmul = torch.backends.cuda.matmul
    try:
        precision = matmul.fp32_precision
    except AttributeError:
        return bool(matmul.allow_tf32)
    if precision == "none":
        precision = getattr(torch.backends, "fp32_precision", "none")
    return precision == "tf32"


def _peak(spec: PointSpec, use_cuda: bool, device_name: str) -> RankPeak:
    """The device peak MFU divides by: the datasheet's (GPU) or this host's measured matmul peak (CPU)."""
    from sweeper.job.cpu_peak import cpu_peak
    from sweeper.results.mfu import gpu_peak

    if use_cuda:
        dtype = spec.precision
        if dtype == "fp32" and tf32_matmuls():
            dtype = "tf32"
        p = gpu_peak(device_name, dtype)
    else:
        p = cpu_peak(spec.precision if spec.precision != "fp16" else "fp32")  # measured once per host, reused
    return {"flops": p.flops, "source": p.source}


def _search(point_dir: Path) -> int:
    from sweeper.job.batch_trials import run_search

    return run_search(point_dir)


#: The modes a rank runs (``--mode=<name>``), the default first.
MODES: dict[str, life.Mode] = {"measure": run_rank, "search": _search}


def main(argv: list[str] | None = None) -> int:
    """Entry point of every rank: ``argv`` ``[point_dir]`` (measure) or ``["--mode=search", point_dir]``; the orphan
    guard, then the mode (:func:`sweeper.job.rank.main`). Returns the exit code."""
    return life.main(argv, MODES, "sweeper.job.harness")


if __name__ == "__main__":
    life.exit_now(main())  # the rank file is written: skip the interpreter's teardown
