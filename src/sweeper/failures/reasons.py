"""The sentence a person reads for each kind of failure: what happened, with the numbers, and what to change.

Plain text only (never markup). Byte counts are shown with :func:`sweeper.units.format_bytes` (binary units,
labelled); steps are optimizer steps, counted as the Trainer's ``state.global_step`` (steps finished).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from sweeper.failures.oom import OomInfo
from sweeper.failures.phase import in_library_config_code
from sweeper.failures.text import MODULE_MISSING, WRAPPED_IMPORT, first_line, informative_summary, short_type
from sweeper.units import format_bytes

#: Exception types that carry a rejected configuration when raised from library setup code.
CONFIG_TYPES = frozenset({"ValueError", "TypeError", "DeepSpeedConfigError"})


def oom_reason(info: OomInfo, phase: str, exc_type: str) -> str:
    """Where memory ran out, the allocation that failed and the allocator's numbers, then the fix for the phase
    (evaluation: ``eval_accumulation_steps``; fragmentation: ``expandable_segments``; else smaller batch/sequence,
    checkpointing or more sharding)."""
    if info.device_kind == "cpu" or (info.device_kind is None and short_type(exc_type) == "MemoryError"):
        where = "the host (CPU)"
    else:
        where = info.device or "the device"
    head = "out of memory" + (" during evaluation" if phase == "eval" else "") + f" on {where}"
    if info.requested_bytes is not None:
        head += f" while trying to allocate {format_bytes(info.requested_bytes)}"
    facts = []
    if info.free_bytes is not None and info.capacity_bytes is not None:
        facts.append(f"{format_bytes(info.free_bytes)} free of {format_bytes(info.capacity_bytes)}")
    elif info.capacity_bytes is not None:
        label = "limit" if info.device_kind == "mps" else "capacity"
        facts.append(f"{label} {format_bytes(info.capacity_bytes)}")
    elif info.free_bytes is not None:
        facts.append(f"{format_bytes(info.free_bytes)} free")
    if info.other_process_bytes and info.in_use_bytes is not None:
        facts.append(f"other processes hold {format_bytes(info.other_process_bytes)}")
    if info.fragmentation_hint:
        tip = "fragmentation"
        if info.device_kind == "cuda":
            tip += ", try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        facts.append(f"{format_bytes(info.unallocated_reserved_estimate)} reserved but unallocated: {tip}")
    reason = head + (f" ({'; '.join(facts)})" if facts else "")
    if phase == "eval":
        return reason + (
            "; evaluation keeps all logits on the device until the end: set eval_accumulation_steps or lower "
            "the eval batch size (the training measurements stay valid)"
        )
    if info.fragmentation_hint:
        return reason
    if where == "the host (CPU)":
        return reason + "; reduce per_device_batch_size or seq_len, or run fewer ranks per node"
    return reason + "; reduce per_device_batch_size or seq_len, set gc=true, or shard more (fsdp=full_shard, zero=3)"


def import_reason(text: str, wrapper: str = "") -> str:
    """Which module is missing (or which name cannot be imported), who needed it when a wrapper says so
    (transformers' ``Failed to import <module> because of the following error``), and where to install it."""
    m = MODULE_MISSING.search(text or "")
    if m and m.group(1):
        what = f"module {m.group(1)!r} is missing"
    elif m:
        what = f"name {m.group(2)!r} cannot be imported (a version mismatch?)"
    else:
        what = f"import failed ({first_line(text)})"
    w = WRAPPED_IMPORT.search(wrapper or "") or WRAPPED_IMPORT.search(text or "")
    if w and w.group(1) != (m.group(1) if m else None):
        what += f" (needed by {w.group(1)})"
    return f"{what} in the job's environment: install it where the ranks run (not only on the submit host)"


_CONFIG_MESSAGES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"Attempting to unscale FP16 gradients"),
        (
            "the model weights are float16 and fp16 AMP is on (fp16 weights + fp16 AMP): the GradScaler cannot unscale "
            "fp16 gradients; load the model in float32 "
            "(model_dtype=float32: fp16 means fp32 master weights + autocast) "
            "or use precision=bf16"
        ),
    ),
    (
        re.compile(r"activation_checkpointing in FSDP config and the gradient_checkpointing", re.IGNORECASE),
        (
            "FSDP activation checkpointing and the Trainer's gradient_checkpointing were both set: under FSDP, gc=true "
            "means FSDP-native activation checkpointing only"
        ),
    ),
    (
        re.compile(r"Your setup doesn't support bf16|requires Ampere or a newer GPU", re.IGNORECASE),
        (
            "this device cannot run the requested precision (bf16/tf32 need compute capability 8.0): choose another "
            "precision or partition"
        ),
    ),
    (
        re.compile(r"(?:TrainingArguments|Trainer|\w*Config)\.__init__\(\) got an unexpected keyword argument"),
        (
            "an argument is not accepted by the installed transformers version (renamed or removed): use that "
            "version's argument names"
        ),
    ),
)


def config_reason(short: str, message: str, frame_list: list[tuple[str, str]], raw_phase: str) -> str | None:
    """The reason when the failure is a rejected configuration (docs/cases.md#p03), else ``None``: a known message, or a
    ``ValueError``/``TypeError`` raised during setup from library code that validates configurations, quoting the
    message's informative lines (the one naming the key or the fix, not only the first)."""
    for pattern, reason in _CONFIG_MESSAGES:
        if pattern.search(message or ""):
            return reason
    if short in CONFIG_TYPES and raw_phase == "setup" and in_library_config_code(frame_list):
        return (
            f"the configuration was rejected during setup ({short}: {informative_summary(message)}): fix the "
            "point's configuration; retrying it unchanged fails the same way"
        )
    if short == "DeepSpeedConfigError":
        return f"the DeepSpeed configuration was rejected ({informative_summary(message)}): fix the generated ds config"
    return None


#: torch.distributed's TCPStore server could not take its port (the c10d rendezvous of a point's ranks), in the
#: wording of torch >= 2.4 ("The server socket has failed to listen on any local network address. port: 29500, ...,
#: name: EADDRINUSE, ...") and of older releases ("... failed to bind to [::]:29500 (errno: 98 - Address already in
#: use)"): the whole line, to quote.
RENDEZVOUS_LISTEN = re.compile(
    r"(?:The )?server socket has failed to (?:listen on any local network address|bind to)[^\n]*", re.IGNORECASE
)
_PORT = re.compile(r"\bport:\s*(\d+)|bind to \S*:(\d+)")


def rendezvous_port_reason(text: str) -> str:
    """The reason of a rendezvous whose port was taken (:data:`RENDEZVOUS_LISTEN` found in ``text``): the
    environment's fault, never the point's, and what to do."""
    m = RENDEZVOUS_LISTEN.search(text or "")
    line = m.group(0) if m else ""
    port = next((g for g in found.groups() if g), "?") if (found := _PORT.search(line)) else "?"
    return (
        f"the ranks' rendezvous could not listen on port {port}: another process on the first node holds it "
        f"({first_line(line, 160)}); the environment's fault (or sweeper's choice of port), not your configuration: "
        "run the point again (launcher.rerun_statuses=[error] with hydra.sweep.dir=<sweep>; a SLURM job draws its "
        "port from its job id, so a new job gets another), or set MASTER_PORT to a free port below 32768 in the "
        "job's environment (SLURM; a local point's torchrun picks a free port itself)"
    )


_TIMEOUT = re.compile(r"time[sd]? ?out|timing out", re.IGNORECASE)


def collective_reason(message: str) -> str:
    """Which backend's collective failed or timed out, and that it is usually a symptom of another rank."""
    low = (message or "").lower()
    backend = "NCCL" if "nccl" in low else "gloo" if "gloo" in low else "c10d"
    what = "timed out" if _TIMEOUT.search(message or "") else "failed"
    return (
        f"a {backend} collective {what} ({first_line(message, 120)}): usually a symptom; another rank failed or "
        "hung first, so read the first failing rank's log; if all ranks were alive, raise the timeout or check the "
        "network interface"
    )


ZERO3_RECOMPUTE = (
    "ZeRO-3 + gradient checkpointing: a recomputed tensor has size 0 (ZeRO-3 repartitioned a parameter, usually a "
    "frozen one, before the checkpoint recompute; huggingface/transformers#47254, fixed in DeepSpeed 0.19.3): do not "
    "retry this config unchanged; use use_reentrant=true, zero=2, or a fixed DeepSpeed"
)
CHECKPOINT_RECOMPUTE = (
    "gradient checkpointing recomputed tensors that differ from the forward pass (torch.utils.checkpoint "
    "CheckpointError): sweep the other use_reentrant value (use_reentrant=true,false); under FSDP use FSDP-native "
    "activation checkpointing"
)


def runtime_reason(short: str, message: str) -> str:
    """Any other error: its type and the informative lines of its message."""
    summary = informative_summary(message) or "no message"
    return f"{short or 'error'}: {summary} (where it was raised: failure.traceback_tail in the point's result.json)"


def internal_reason(
    site: str, short: str, message: str, kept: str = "the step times measured before it are kept"
) -> str:
    """A fault of sweeper's own code at ``site`` (:data:`sweeper.job.faults.SITES`) on this point, never the user's
    error; ``kept``: what was measured before it and stays in the record."""
    summary = informative_summary(message) or "no message"
    return (
        f"sweeper's own {site} code failed on this point (a bug of sweeper's, please report it; not your "
        f"configuration): {short or 'error'}: {summary}; {kept}"
    )


def _ranks_at(steps: Mapping[int, int | None]) -> tuple[str, str | None]:
    """``rank 1 ... at step 4`` or ``ranks 1, 3 ... at steps 4, 5`` (the subject and the steps)."""
    ranks = sorted(steps)
    known = [steps[r] for r in ranks]
    who = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))
    if any(s is None for s in known):
        return who, None
    at = f"step {known[0]}" if len(set(known)) == 1 else "steps " + ", ".join(map(str, known))
    return who, at


def _it(ranks: Mapping[int, int | None]) -> str:
    return "it" if len(ranks) == 1 else "they"


def early_exit_reason(
    early: dict[int, int],
    total_steps: int,
    consequence: str | None = None,
    waited_s: float | None = None,
    world_size: int | None = None,
) -> str:
    """A rank that left training normally before the others (docs/cases.md#t07), and what that did to the others.

    Args:
        early: rank -> optimizer steps it finished (fewer than ``total_steps``).
        total_steps: optimizer steps the point asked for (warm-up + timed + memory + profile).
        consequence: the other ranks' failure (e.g. their gloo collective error), quoted as a consequence.
        waited_s: set when the others waited in a collective until the point's timeout (seconds).
        world_size: the point's ranks; when every one of them stopped early (together), the reason says so.
    """
    who, at = _ranks_at(early)
    if world_size is not None and len(early) >= world_size:
        return (
            f"every rank stopped early at {at} of {total_steps} (fewer steps than asked): training ended normally "
            "before the measurement windows did (a callback set control.should_training_stop, e.g. early stopping, "
            "or a step/epoch limit was reached), so these are not the numbers of the point asked for: remove the "
            "callback or limit"
        )
    reason = (
        f"{who} stopped early at {at} of {total_steps} (fewer steps than asked): {_it(early)} left training "
        "normally while the other ranks went on (a callback set control.should_training_stop, or a step/epoch limit "
        f"was reached, on {'that rank' if len(early) == 1 else 'those ranks'} only)"
    )
    if waited_s is not None:
        reason += f"; the other ranks then waited for it in a collective until timeout_s={waited_s:g} s"
    elif consequence:
        reason += f"; the other ranks' error that followed is a consequence, not the cause ({consequence})"
    return reason + ": make every rank stop at the same step"


def dead_rank_reason(steps: dict[int, int | None], total_steps: int, crash: str) -> str:
    """A rank that died without writing its results: which one, at which step, and the signal's advice.

    Args:
        steps: missing rank -> optimizer steps it had finished (its ``rank<r>.step`` file), ``None`` when it left
            no progress file (it died before training began).
        total_steps: optimizer steps the point asked for.
        crash: the signal's reason (:func:`sweeper.failures.signals.crash_reason`).
    """
    who, at = _ranks_at(steps)
    if at is not None:
        where = f"at {at} of {total_steps}"
    elif all(s is None for s in steps.values()):
        where = "before training began (setup)"
    else:
        where = (
            "(steps: "
            + ", ".join(f"rank {r}: {s if s is not None else 'setup'}" for r, s in sorted(steps.items()))
            + ")"
        )
    return f"{who} died {where} without writing {'its' if len(steps) == 1 else 'their'} results: {crash}"


def device_mapping_reason(message: str) -> str:
    """The reason of a rank-to-GPU mapping error ("Duplicate GPU detected", "invalid device ordinal"): more ranks on
    a node than it has GPUs, or a device index it does not have."""
    return (
        f"the ranks do not map one to one onto the node's GPUs ({first_line(message)}): ranks_per_node must be at most "
        "cluster.gpus_per_node (each rank takes the GPU of its local rank), and CUDA_VISIBLE_DEVICES / the "
        "scheduler's GPU binding must give every rank its own GPU"
    )
