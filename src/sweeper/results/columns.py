"""The result columns: one schema whose names CSV, Parquet, the report, capacity planning and W&B share.

:data:`COLUMNS` is the explicit list (name, pandas dtype, unit, meaning, where the record holds it); every column
carries its unit in its name (``_bytes``, ``_s``, ``_gib``, ``tokens_per_s``) and in its :class:`Column`. A *family*
column (dtype ``"family"``) stands for the dotted columns of one spec dict (:mod:`sweeper.results.row` flattens
them). :data:`SCHEMA_VERSION` is frozen with the columns (``tests/unit/test_frozen_surface.py``).

Nothing here imports torch or pandas.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sweeper.units import GIB

if TYPE_CHECKING:
    from sweeper.results.record import Record

#: Bump when a column is renamed, removed or changes meaning (adding columns does not need a bump).
SCHEMA_VERSION = 1

STR, INT, FLOAT, BOOL, FAMILY = "str", "Int64", "float64", "boolean", "family"


@dataclass(frozen=True)
class Column:
    """One column of the row.

    Attributes:
        name: the column name, as the command line spells the key for swept keys.
        dtype: pandas dtype (``str``, ``Int64``, ``float64``, ``boolean``), or ``family`` for the dotted columns
            flattened from one spec dict.
        unit: the unit of the values (``bytes``, ``s``, ``GiB``, ``tokens/s``, ...), ``""`` for text, flags and
            counts.
        doc: what the value means.
        source: where the record holds it: ``"<part>.<key>"`` (``spec.fsdp``, ``metrics.peak_mem_bytes``,
            ``ran.wrapper``, ``failure.rank``, ``env.slurm_job_id``), a record attribute (``status``), or a
            function of the record.
    """

    name: str
    dtype: str
    unit: str
    doc: str
    source: str | Callable[[Record], Any]


def fp32_master_weights(model_dtype: str | None, precision: str | None, zero: int | None) -> bool | None:
    """Whether the optimizer updates an fp32 copy of the weights (the "fp32 master weights" of mixed precision).

    True when the weights themselves are fp32 (``model_dtype=float32``: fp32 training, or autocast ``bf16``/``fp16``
    over fp32 weights, as the HF Trainer's ``bf16=True``/``fp16=True`` do: the weights stay fp32, only the matmuls
    run in half precision), or when DeepSpeed ZeRO (``zero`` > 0) trains in ``bf16``/``fp16``: its ZeRO optimizers
    keep fp32 partitions of the weights and update those (Rajbhandari et al., "ZeRO", SC'20, section 3: "fp32
    copies of the parameters"; DeepSpeed ``runtime/zero/stage_1_and_2.py`` ``single_partition_of_fp32_groups``,
    ``runtime/zero/stage3.py`` ``fp32_partitioned_groups_flat``). False for pure half-precision training: weights
    created in ``bfloat16``/``float16`` without DeepSpeed (``zero=0``) are updated in place in that dtype (and so
    are half-precision weights under ZeRO with ``precision=fp32``, where DeepSpeed's half-precision optimizers are
    off).

    Returns:
        True/False, or None when ``model_dtype`` or ``precision`` is unknown (a record without a spec).
    """
    if model_dtype is None or precision is None:
        return None
    if model_dtype == "float32":
        return True
    return bool(zero) and precision in ("bf16", "fp16")


def _world_size(r: Record) -> int | None:
    ws, spec = (r.ran or {}).get("world_size"), r.spec or {}
    if ws is None and spec.get("ranks_per_node") is not None and spec.get("nodes") is not None:
        ws = spec["ranks_per_node"] * spec["nodes"]
    return ws


def _degree(key: str):
    """A parallelism degree of the spec (``tp``, ``sp``, ``pp``): 1 for a record of a version without the key."""

    def value(r: Record) -> int | None:
        return int((r.spec or {}).get(key, 1)) if r.spec else None

    return value


def _dp(r: Record) -> int | None:
    """The data-parallel degree: world size / (tp x sp x pp), as :attr:`sweeper.config.spec.PointSpec.dp`."""
    ws, tp, sp, pp = _world_size(r), _degree("tp")(r), _degree("sp")(r), _degree("pp")(r)
    if ws is None or tp is None or sp is None or pp is None:
        return None
    return max(1, ws // (tp * sp * pp))


def _peak_gib(r: Record) -> float | None:
    peak = (r.metrics or {}).get("peak_mem_bytes")
    return peak / GIB if isinstance(peak, (int, float)) and not math.isnan(peak) else None


def _fp32_master(r: Record) -> bool | None:
    s = r.spec or {}
    return fp32_master_weights(s.get("model_dtype"), s.get("precision"), s.get("zero"))


def _part(source: str) -> Callable[[Record], Any]:
    part, _, key = source.partition(".")
    return lambda r: (getattr(r, part) or {}).get(key)


def _slurm_failure(key: str) -> Callable[[Record], Any]:
    """A SLURM number the failure holds only for records of SLURM jobs (the scheduler's or the job's own)."""
    return lambda r: (r.failure or {}).get(key) if (r.failure or {}).get("slurm_job_id") is not None else None


def _first(*getters: Callable[[Record], Any]) -> Callable[[Record], Any]:
    return lambda r: next((v for v in (g(r) for g in getters) if v is not None), None)


def _predicted(key: str) -> Callable[[Record], Any]:
    return lambda r: (r.predicted or {}).get(key)


def relative_error(predicted: Any, measured: Any) -> float | None:
    """``(predicted - measured) / measured``: positive when the model over-predicts. None unless both are finite
    numbers (not bools) and ``measured`` is not 0."""
    nums = [x for x in (predicted, measured) if isinstance(x, (int, float)) and not isinstance(x, bool)]
    if len(nums) != 2 or not all(math.isfinite(x) for x in nums) or measured == 0:
        return None
    return (predicted - measured) / measured


def _rel_error(predicted_key: str, metric_key: str) -> Callable[[Record], Any]:
    """The relative error of a prediction against the point's measurement, for ``ok`` records only."""

    def error(r: Record) -> float | None:
        if r.status != "ok":
            return None
        return relative_error((r.predicted or {}).get(predicted_key), (r.metrics or {}).get(metric_key))

    return error


def _batch(r: Record) -> int | None:
    """The per-device batch that ran: the spec's (a searched point's record holds the batch found), None for a
    ``per_device_batch_size=auto`` point that never ran one (refused before its search)."""
    b = (r.spec or {}).get("per_device_batch_size")
    return b if isinstance(b, int) and not isinstance(b, bool) else None


def _timed_steps(r: Record) -> int | None:
    """The fixed ``timed_steps`` a point asked for; None for ``timed_steps=auto``, whose spec holds only the cap
    (``timing.max_timed_steps``), not a number of steps that ran (``timed_steps_measured`` has that)."""
    spec = r.spec or {}
    return None if spec.get("timed_auto") else spec.get("timed_steps")


def _batch_searched(r: Record) -> bool:
    """``per_device_batch_size=auto``: the batch is the largest found to fit (docs/batch-search.md)."""
    return (r.spec or {}).get("per_device_batch_size") == "auto" or "batch_search" in (r.ran or {})


def _keys(r: Record) -> str | None:
    keys = (r.failure or {}).get("keys")
    return " ".join(map(str, keys)) if isinstance(keys, (list, tuple)) else keys


# fmt: off
#: Every column of the row, in order (families expand in place; see the module docstring).
COLUMNS: tuple[Column, ...] = (
    Column("status", STR, "", "one of sweeper.results.record.STATUSES", "status"),
    Column("point_id", STR, "", "12 hex digits, hash of the normalised point spec", "point_id"),
    # ---- the point's configuration (swept keys, as on the command line) ----
    Column("model", STR, "", "architecture name (config group model/)", "spec.model"),
    Column("fsdp", STR, "", "TrainingArguments.fsdp strategy", "spec.fsdp"),
    Column("fsdp_config", FAMILY, "", "fsdp_config.<key>: merged into TrainingArguments.fsdp_config",
           "spec.fsdp_config"),
    Column("gc", BOOL, "", "gradient checkpointing", "spec.gc"),
    Column("use_reentrant", BOOL, "", "torch.utils.checkpoint use_reentrant", "spec.use_reentrant"),
    Column("precision", STR, "", "fp32, or autocast bf16/fp16", "spec.precision"),
    Column("model_dtype", STR, "", "dtype the weights are created in", "spec.model_dtype"),
    Column("fp32_master_weights", BOOL, "", "the optimizer updates an fp32 copy of the weights (see "
           "fp32_master_weights())", _fp32_master),
    Column("zero", INT, "", "DeepSpeed zero_optimization.stage (0 = no DeepSpeed)", "spec.zero"),
    Column("deepspeed_config", FAMILY, "", "deepspeed_config.<key>: merged into the generated DeepSpeed config",
           "spec.deepspeed_config"),
    Column("tp", INT, "", "tensor-parallel degree (DeepSpeed AutoTP; 1 = off; docs/parallelism.md)", _degree("tp")),
    Column("sp", INT, "", "sequence-parallel degree (DeepSpeed Ulysses; 1 = off)", _degree("sp")),
    Column("pp", INT, "", "pipeline-parallel degree (planner only; 1 = off)", _degree("pp")),
    Column("dp", INT, "", "data-parallel degree: world_size / (tp x sp), the ranks that each train on a batch of "
           "their own", _dp),
    Column("per_device_batch_size", INT, "samples", "micro-batch per device that ran (auto: the batch found)", _batch),
    Column("batch_searched", BOOL, "", "per_device_batch_size=auto: searched (ran.batch_search)", _batch_searched),
    Column("seq_len", INT, "tokens", "tokens per sample", "spec.seq_len"),
    Column("grad_accum", INT, "", "gradient accumulation steps", "spec.grad_accum"),
    Column("ranks_per_node", INT, "", "processes per node", "spec.ranks_per_node"),
    Column("nodes", INT, "", "nodes", "spec.nodes"),
    Column("world_size", INT, "", "ranks: verified setup, else ranks_per_node x nodes", _world_size),
    Column("device", STR, "", "auto, cpu or cuda", "spec.device"),
    Column("warmup_steps", INT, "steps", "optimizer steps dropped before timing", "spec.warmup_steps"),
    Column("timed_steps", INT, "steps", "optimizer steps timed as asked (timed_steps=auto: empty, see timed_auto and "
           "timed_steps_measured)", _timed_steps),
    Column("memory_steps", INT, "steps", "optimizer steps with the memory tracker", "spec.memory_steps"),
    Column("profile_steps", INT, "steps", "optimizer steps profiled", "spec.profile_steps"),
    Column("eval", BOOL, "", "evaluation after training", "spec.eval"),
    Column("seed", INT, "", "model init and synthetic data seed", "spec.seed"),
    Column("timeout_s", FLOAT, "s", "wall-clock limit of the point", "spec.timeout_s"),
    Column("training_args", FAMILY, "", "training_args.<key>: any other TrainingArguments field",
           "spec.training_args"),
    Column("callbacks", STR, "", "extra TrainerCallbacks (JSON list of _target_ dicts)", "spec.callbacks"),
    Column("profile_trace", BOOL, "", "per-rank chrome trace written", "spec.profile_trace"),
    Column("host_mem_limit_gib", FLOAT, "GiB", "host memory limit of the point", "spec.host_mem_limit_gib"),
    Column("prune", BOOL, "", "capacity planning skips a point predicted not to fit", "spec.prune"),
    Column("train_tokens", FLOAT, "tokens", "tokens of the planned training run (days, GPU-hours)",
           "spec.train_tokens"),
    Column("plan", FAMILY, "", "plan.<key>: capacity planning's assumptions (efficiency, margins)", "spec.plan"),
    Column("search", FAMILY, "", "search.<key>: how the multirun walked the grid (search=grid|frontier, the window "
           "this record measured, the frontier search's margins; docs/search.md)", "spec.search"),
    Column("model.model_type", STR, "", "transformers model_type of the architecture", "spec.model_type"),
    Column("model.decoder_layer", STR, "", "decoder block class (FSDP wrap and checkpointing unit)",
           "spec.decoder_layer"),
    Column("model.config", FAMILY, "", "model.config.<key>: the architecture's numbers", "spec.model_config"),
    # ---- measurements ----
    Column("step_time_s_median", FLOAT, "s", "median step time of the timed steps, slowest rank per step",
           "metrics.step_time_s_median"),
    Column("step_time_s_p10", FLOAT, "s", "10th percentile step time", "metrics.step_time_s_p10"),
    Column("step_time_s_p90", FLOAT, "s", "90th percentile step time", "metrics.step_time_s_p90"),
    Column("step_time_s_ci95_low", FLOAT, "s", "lower bound of the 95 % confidence interval of the median step time "
           "(order statistics, sweeper.results.stats)", "metrics.step_time_s_ci95_low"),
    Column("step_time_s_ci95_high", FLOAT, "s", "upper bound of the 95 % confidence interval of the median step time",
           "metrics.step_time_s_ci95_high"),
    Column("step_time_ci95_rel", FLOAT, "fraction", "half-width of that interval / median step time",
           "metrics.step_time_ci95_rel"),
    Column("step_time_ci95_coverage", FLOAT, "fraction", "the interval's real coverage: >= 0.95 from 6 timed steps; "
           "below it, [min, max] of fewer steps", "metrics.step_time_ci95_coverage"),
    Column("timed_stop", STR, "", "why the timed window ended: fixed (a number of steps), ci (timed_steps=auto: "
           "interval within timing.ci_rel), cap (timing.max_timed_steps)", "metrics.timed_stop"),
    Column("runqueue_wait_frac", FLOAT, "fraction", "CPU contention: seconds a rank's training thread waited on a "
           "CPU run queue in the timed window (Linux schedstat) / the window's wall seconds, max over ranks; empty "
           "when schedstat was unreadable (docs/measurement.md, Contention)",
           "metrics.runqueue_wait_frac"),
    Column("steal_frac", FLOAT, "fraction", "hypervisor steal: CPU seconds the host's virtual CPUs lost to the "
           "hypervisor in the timed window (/proc/stat steal) / (the window's wall seconds x CPUs), max over ranks; "
           "empty off Linux (docs/measurement.md, Contention)", "metrics.steal_frac"),
    Column("contended", BOOL, "", "runqueue_wait_frac or steal_frac above timing.contention_warn_frac (default "
           "0.1): measured under CPU contention, compare with other points only after a rerun on a quiet machine",
           "metrics.contended"),
    Column("zero_loss", BOOL, "", "the training loss was exactly 0 at every logged step: the point trained on no "
           "signal, so its throughput measures no real training (docs/measurement.md)", "metrics.zero_loss"),
    Column("tokens_per_s", FLOAT, "tokens/s", "all devices", "metrics.tokens_per_s"),
    Column("tokens_per_s_per_device", FLOAT, "tokens/s", "tokens_per_s / world_size",
           "metrics.tokens_per_s_per_device"),
    Column("samples_per_s", FLOAT, "samples/s", "all devices", "metrics.samples_per_s"),
    Column("tflops_per_device", FLOAT, "TFLOP/s", "flops_per_token x tokens/s/device / 1e12",
           "metrics.tflops_per_device"),
    Column("mfu", FLOAT, "fraction", "tflops_per_device / peak (PaLM convention)", "metrics.mfu"),
    Column("peak_mem_bytes", INT, "bytes", "peak memory, max over ranks (see peak_mem_kind)", "metrics.peak_mem_bytes"),
    Column("peak_mem_gib", FLOAT, "GiB", "peak_mem_bytes / 2**30", _peak_gib),
    Column("peak_mem_kind", STR, "", "which counter peak_mem_bytes is", "metrics.peak_mem_kind"),
    Column("peak_reserved_bytes", INT, "bytes", "CUDA max_memory_reserved, max over ranks",
           "metrics.peak_reserved_bytes"),
    Column("rss_peak_bytes", INT, "bytes", "process peak RSS, max over ranks", "metrics.rss_peak_bytes"),
    Column("param_bytes_per_rank", INT, "bytes", "parameter bytes one rank holds", "metrics.param_bytes_per_rank"),
    Column("grad_bytes_per_rank", INT, "bytes", "gradient bytes one rank holds", "metrics.grad_bytes_per_rank"),
    Column("optimizer_state_bytes_per_rank", INT, "bytes", "optimizer-state bytes one rank holds",
           "metrics.optimizer_state_bytes_per_rank"),
    Column("on_frontier", BOOL, "", "on the tokens/s/device vs peak_mem_bytes Pareto frontier of the ok rows",
           lambda r: False),
    Column("frontier_tie_with", STR, "", "frontier rows: the ok points (space-separated ids) whose tokens/s/device "
           "throughput interval overlaps this one's (from the 95 % interval of the median step time; p10-p90 for "
           "older records), a tie on throughput (sweeper.results.frontier)", lambda r: None),
    Column("timed_steps_measured", INT, "steps", "timed steps actually measured", "metrics.timed_steps"),
    Column("warmup_steps_dropped", INT, "steps", "warm-up steps dropped", "metrics.warmup_steps_dropped"),
    Column("skipped_steps", INT, "steps", "timed steps whose optimizer update was skipped (fp16 loss-scale "
           "overflow), left out of the step-time statistics; max over ranks", "metrics.skipped_steps"),
    Column("measurement_note", STR, "", "a measurement sweeper's own code failed to take on an ok point (which, "
           "where, why); the other numbers stand", "metrics.measurement_note"),
    Column("flops_per_token", FLOAT, "FLOP/token", "6N + 12 L a d s (PaLM), recompute not counted",
           "metrics.flops_per_token"),
    Column("mfu_peak_flop_per_s", FLOAT, "FLOP/s", "the peak MFU divides by", "metrics.mfu_peak_flops"),
    Column("mfu_peak_source", STR, "", "where the peak comes from", "metrics.mfu_peak_source"),
    Column("mfu_note", STR, "", "why there is no MFU", "metrics.mfu_note"),
    # ---- failure ----
    Column("reason", STR, "", "for every non-ok status: a sentence a person can act on", "reason"),
    Column("error_kind", STR, "", "family of an error (sweeper.failures)", "error_kind"),
    Column("failure_phase", STR, "", "setup, train or eval", "failure.phase"),
    Column("failure_rank", INT, "", "rank that failed first", "failure.rank"),
    Column("failure_step", INT, "", "optimizer step of the failure", "failure.step"),
    Column("failure_exception_type", STR, "", "exception class", "failure.exception_type"),
    Column("failure_rule", STR, "", "gate rule that refused the point", "failure.rule"),
    Column("failure_keys", STR, "", "keys the gate named (space-separated)", _keys),
    Column("oom_requested_bytes", INT, "bytes", "allocation that failed", "failure.requested_bytes"),
    Column("oom_capacity_bytes", INT, "bytes", "device capacity", "failure.capacity_bytes"),
    Column("oom_free_bytes", INT, "bytes", "free device memory", "failure.free_bytes"),
    Column("oom_in_use_bytes", INT, "bytes", "memory in use by the process", "failure.in_use_bytes"),
    Column("oom_allocated_bytes", INT, "bytes", "allocated by PyTorch", "failure.allocated_bytes"),
    Column("oom_reserved_unallocated_bytes", INT, "bytes", "reserved but unallocated (fragmentation)",
           "failure.reserved_unallocated_bytes"),
    Column("oom_device_index", INT, "", "CUDA device of the OOM", "failure.device_index"),
    Column("oom_fragmentation_hint", BOOL, "", "the allocator suggested expandable_segments",
           "failure.fragmentation_hint"),
    Column("host_rss_peak_bytes", INT, "bytes", "peak host RSS of the point's processes (local: summed over the "
           "process tree, sampled every 50 ms; SLURM: what slurmstepd reported when it killed the job)",
           _first(_part("metrics.host_rss_peak_bytes"), _part("failure.host_rss_bytes"))),
    Column("host_mem_limit_bytes", INT, "bytes", "host-memory limit of the point (host_mem_limit_gib, or the "
           "SLURM job's mem)", _first(_part("metrics.host_mem_limit_bytes"), _part("failure.host_mem_limit_bytes"))),
    # ---- what really ran ----
    Column("checkpointing_impl", STR, "", "checkpointing implementation verified", "ran.checkpointing_impl"),
    Column("compute_dtype", STR, "", "dtype a Linear really computes in", "ran.compute_dtype"),
    Column("wrapper", STR, "", "model wrapper type", "ran.wrapper"),
    Column("deepspeed_stage", INT, "", "ZeRO stage the engine reports", "ran.deepspeed_stage"),
    Column("fsdp_version", INT, "", "FSDP 1 or 2", "ran.fsdp_version"),
    Column("device_type", STR, "", "cpu or cuda", _first(_part("ran.device_type"), _part("env.device_type"))),
    Column("device_name", STR, "", "device model", _first(_part("ran.device_name"), _part("env.device_name"))),
    Column("rank_start", STR, "", "how the local launcher started the ranks: fork (from the pre-flight worker, "
           "libraries imported) or exec (fresh processes under torchrun)", "ran.rank_start"),
    Column("hosts", STR, "", "the host of each rank, in rank order (space-separated)",
           lambda r: " ".join(map(str, (r.env or {}).get("hosts") or [])) or None),
    # ---- SLURM ----
    Column("slurm_job_id", STR, "", "<array>_<task> or job id", _first(_part("env.slurm_job_id"),
                                                                        _part("failure.slurm_job_id"))),
    Column("slurm_state", STR, "", "sacct state of a job the scheduler ended (empty when the job wrote its own "
           "record: it was still RUNNING)", "failure.slurm_state"),
    Column("slurm_exit_code", STR, "", "sacct ExitCode of such a job", "failure.slurm_exit_code"),
    Column("slurm_elapsed_s", FLOAT, "s", "time the job ran", _first(_part("env.slurm_elapsed_s"),
                                                                      _slurm_failure("elapsed_s"))),
    Column("slurm_time_limit_s", FLOAT, "s", "the job's time limit", _first(_part("env.slurm_time_limit_s"),
                                                                             _slurm_failure("time_limit_s"))),
    Column("slurm_restart_count", INT, "", "requeues of the job", "env.slurm_restart_count"),
    # ---- bookkeeping ----
    Column("wall_time_s", FLOAT, "s", "launching the ranks to writing the record", "wall_time_s"),
    Column("overrides", STR, "", "the Hydra overrides of the point (space-separated)",
           lambda r: " ".join(r.overrides or [])),
    Column("replay", STR, "", "shell command that runs the point again", "replay"),
    Column("sweep_id", STR, "", "the sweep's id", "sweep_id"),
    # ---- capacity planning: the model's numbers for the point (sweeper.capacity.predict) and its errors ----
    Column("predicted_peak_bytes", INT, "bytes", "predicted peak tensor bytes per rank (compare peak_mem_bytes)",
           _predicted("peak_bytes")),
    Column("peak_mem_rel_error", FLOAT, "fraction", "(predicted_peak_bytes - peak_mem_bytes) / peak_mem_bytes, ok "
           "rows", _rel_error("peak_bytes", "peak_mem_bytes")),
    Column("predicted_tokens_per_s_per_device", FLOAT, "tokens/s", "predicted throughput per device (CPU: from the "
           "point's measured matmul peak)", _predicted("tokens_per_s_per_device")),
    Column("tokens_per_s_per_device_rel_error", FLOAT, "fraction", "(predicted_tokens_per_s_per_device - "
           "tokens_per_s_per_device) / tokens_per_s_per_device, ok rows",
           _rel_error("tokens_per_s_per_device", "tokens_per_s_per_device")),
    Column("predicted_fits", BOOL, "", "predicted_device_bytes <= predicted_device_mem_bytes x (1 - margin); empty "
           "when unknown", _predicted("fits")),
    Column("predicted_device_bytes", INT, "bytes", "predicted peak plus, on a GPU, fragmentation, CUDA context and "
           "NCCL", _predicted("device_bytes")),
    Column("predicted_device_mem_bytes", INT, "bytes", "device capacity the fit was judged against "
           "(cluster.gpu_mem_gib)", _predicted("device_mem_bytes")),
    Column("predicted_margin", FLOAT, "fraction", "share of device memory held back (plan.memory_margin)",
           _predicted("margin")),
    Column("predicted_max_per_device_batch_size", INT, "samples", "largest micro-batch predicted to fit",
           _predicted("max_per_device_batch_size")),
    Column("predicted_peak_phase", STR, "", "where the predicted peak is (forward-backward or optimizer step)",
           _predicted("peak_phase")),
    Column("predicted_param_bytes_per_rank", INT, "bytes", "predicted parameter bytes per rank",
           _predicted("param_bytes_per_rank")),
    Column("predicted_grad_bytes_per_rank", INT, "bytes", "predicted gradient bytes per rank",
           _predicted("grad_bytes_per_rank")),
    Column("predicted_optimizer_state_bytes_per_rank", INT, "bytes", "predicted optimizer-state bytes per rank",
           _predicted("optimizer_state_bytes_per_rank")),
    Column("predicted_host_bytes_per_node", INT, "bytes", "predicted offloaded states in host memory per node "
           "(ZeRO-Offload, FSDP cpu_offload)", _predicted("host_bytes_per_node")),
    Column("predicted_host_mem_bytes", INT, "bytes", "host memory per node the host fit was judged against "
           "(cluster.host_mem_gib)", _predicted("host_mem_bytes")),
    Column("predicted_host_fits", BOOL, "", "predicted_host_bytes_per_node <= predicted_host_mem_bytes x (1 - margin); "
           "empty when unknown", _predicted("host_fits")),
    Column("predicted_step_time_s", FLOAT, "s", "predicted optimizer step time", _predicted("step_time_s")),
    Column("predicted_compute_s", FLOAT, "s", "predicted compute time per step", _predicted("compute_s")),
    Column("predicted_comm_s", FLOAT, "s", "predicted communication time per step (before overlap)",
           _predicted("comm_s")),
    Column("predicted_mfu", FLOAT, "fraction", "predicted model FLOP utilisation", _predicted("mfu")),
    Column("predicted_efficiency", FLOAT, "fraction", "achieved share of the peak the time model assumed",
           _predicted("efficiency")),
    Column("predicted_efficiency_source", STR, "", "where that efficiency comes from", _predicted("efficiency_source")),
    Column("predicted_peak_flops", FLOAT, "FLOP/s", "device peak the time model used", _predicted("peak_flops")),
    Column("predicted_peak_source", STR, "", "where that peak comes from", _predicted("peak_source")),
    Column("predicted_train_days", FLOAT, "days", "predicted days to train train_tokens", _predicted("train_days")),
    Column("predicted_gpu_hours", FLOAT, "h", "predicted device-hours to train train_tokens",
           _predicted("gpu_hours")),
    Column("predicted_note", STR, "", "what the model could not predict, and why", _predicted("note")),
    Column("schema_version", INT, "", "SCHEMA_VERSION of this row", lambda r: SCHEMA_VERSION),
)
# fmt: on

#: Column name -> column.
BY_NAME: dict[str, Column] = {c.name: c for c in COLUMNS}
#: The prefixes of the dotted columns (``fsdp_config.``, ``deepspeed_config.``, ``training_args.``, ``model.config.``).
FAMILY_PREFIXES: tuple[str, ...] = tuple(f"{c.name}." for c in COLUMNS if c.dtype == FAMILY)
