"""What one rank holds during the backward pass beyond its model states, and across the micro-batches of a
gradient-accumulation step: the FSDP2 units' gathers, gradients and reduce-scatter buffers, DDP's bucket, and the
accumulated gradients of each engine. Bytes per rank; :mod:`sweeper.capacity.memory` turns them into terms of the two
candidate peaks.

FSDP2 as accelerate 1.15 applies it (``accelerate/utils/fsdp_utils.py``, ``fsdp2_prepare_model``): one unit per
decoder layer; the input embedding a unit of its own when untied; the final norm and the output head one unit with
``reshard_after_forward=False`` (with a tied head the input embedding joins that unit, so it stays gathered from the
start of forward to the end of backward); the root (the model) holds what is left (GPT-2's position embedding),
``reshard_after_forward`` False for the root. In backward (torch 2.13 ``torch/distributed/fsdp/_fully_shard/``):

* ``FSDPParamGroup.post_backward`` reshards a unit, copies its unsharded gradients into one reduce-scatter input
  (``foreach_reduce``, reduce dtype: accelerate sets ``reduce_dtype = param_dtype``) and reduce-scatters it into
  a ``1/N`` output; the input is kept alive until the next unit's reduce (``reduce_scatter_max_input_buffers = 1``);
* the next unit in backward order is all-gathered (prefetched) before this one reduces;
* on CPU, gloo's ``reduce_scatter_tensor`` works on a copy of its input (measured: one input-sized temporary);
  NCCL reduces in place;
* the unsharded gradient of the unit being reduced was measured alive through its reduce (CPU ranks); counted on
  GPU too, which can only over-predict;
* with a tied head, autograd holds the output head's weight gradient from the first backward op to the embedding's
  backward and sums it with the embedding's dense gradient: three ``V·h`` gradients at the end (measured).

Gradient accumulation (HF Trainer, transformers 5 ``_inner_training_loop``): every micro-batch but the last runs
under ``accelerator.no_sync``; DeepSpeed runs none (its engine accumulates itself).
"""

from __future__ import annotations

from sweeper.capacity.arch import Arch
from sweeper.capacity.states import Layout, ModelStates

#: (bytes, source) of one held quantity.
Held = tuple[int, str]


def accumulated_grads(arch: Arch, lay: Layout, st: ModelStates) -> Held | None:
    """Gradient bytes alive across the micro-batches of a ``grad_accum > 1`` step (from the first micro-batch's
    backward to the optimizer step), or None where the engine keeps none the model knows of (ZeRO-3).

    * DDP / one rank: ``param.grad`` accumulates in place under ``DistributedDataParallel.no_sync``: ``P·w``.
    * FSDP2: accelerate's ``no_sync`` calls ``set_requires_gradient_sync(False)`` (``Accelerator.no_sync``), so
      ``FSDPParamGroup.post_backward`` returns before the reduce-scatter and each unit's **unsharded** gradient stays
      on its unsharded parameter until the last micro-batch: the whole model's gradient, ``P`` elements in the
      gathered dtype, per rank (Llama-2-7B in bf16: 12.55 GiB; accelerate issue #2531). ``sync_each_batch=True``
      in accelerate's ``GradientAccumulationPlugin`` would reduce every micro-batch instead; the Trainer passes it
      only when asked (``accelerator_config.gradient_accumulation_kwargs``), and sweeper does not.
    * ZeRO-1 (and DeepSpeed's stage 0): gradients are reduced only at the accumulation boundary: the full ``P·w`` of
      the parameters this rank holds (its TP shard, its pipeline stage) stays.
    * ZeRO-2: each micro-batch's gradients are reduced into the flat partition buffer ``grads_in_partition``
      (``P/N·w``), allocated at the first micro-batch's first reduce and kept until the step releases it
      (``_release_ipg_buffers``; DeepSpeed ``runtime/zero/stage_1_and_2.py``).
    """
    if lay.strategy in ("ddp", "single"):
        return st.grad_bytes or 0, "param.grad accumulated under DDP no_sync over earlier micro-batches"
    if lay.sharded:
        return (
            arch.total_params * lay.gathered_bytes,
            "FSDP2 no_sync (set_requires_gradient_sync(False)): every unit's unsharded gradient kept over the "
            "micro-batches, the whole model per rank (accelerate#2531)",
        )
    local = sum(r * c for r, c in arch.stage_param_shapes(lay.tp, lay.pp, lay.stage))  # this rank's TP / stage
    if lay.strategy in ("zero0", "zero1"):
        return local * lay.param_bytes, "ZeRO-1: full gradients until the accumulation boundary"
    if lay.strategy == "zero2":
        part = -(-local // lay.shards)
        return part * lay.param_bytes, "ZeRO-2: grads_in_partition, reduced into every micro-batch, kept to the step"
    return None


def _units(arch: Arch) -> tuple[int, int, int]:
    """Elements of (the unit whose backward comes last: the embedding's, the root's leftovers, the output unit
    reduced first in backward when untied, else 0)."""
    e, pos, norm = arch.vocab * arch.hidden, arch.positions * arch.hidden, arch.norm_params
    if arch.tied:
        return e + norm, pos, 0
    return e, pos, e + norm


def fsdp_end_of_backward(arch: Arch, lay: Layout, st: ModelStates, accumulating: bool) -> dict[str, Held]:
    """The end-of-backward terms of an FSDP2 rank (``grads``, ``gathered_working_set``, ``backward_scratch``): the
    larger of the moments around the last unit's backward (the embedding's), see the module doc.

    * before its reduce: sharded gradients of every other unit, the embedding unit and the root gathered, the
      embedding's gradient (tied: the three ``V·h`` gradients and the final norm's), the root's unsharded gradients
      and the last layer's reduce-scatter input (kept until this reduce);
    * during its reduce (untied): the gathered embedding freed, its unsharded gradient, the reduce-scatter input,
      gloo's copy of it (CPU) and the ``1/N`` output;
    * with accumulation, the end of a ``no_sync`` micro-batch: every unit's unsharded gradient, no sharded one.

    Returns:
        term name -> (bytes, source).
    """
    g, p, n = lay.gathered_bytes, lay.param_bytes, lay.shards
    cpu = 1 if lay.device == "cpu" else 0
    last, root, _ = _units(arch)
    layer = arch.layer_params * g
    present = st.step_grad_bytes - (last + root) // n * p
    e = arch.vocab * arch.hidden
    if arch.tied:
        temps = 3 * e * g + arch.norm_params * g
        before = (last + root) * g, temps + root * g + layer, "tied head: 3 V·h gradients, root grads, a layer's RS"
        during = before
    else:
        before = (last + root) * g, e * g + root * g + layer, "embedding's gradient, root grads, a layer's RS input"
        rs = e * g + e * g * (1 + cpu) + e // n * g
        during = root * g, rs + root * g, "embedding's reduce-scatter: gradient, input, gloo copy (CPU), output"
    gathered, scratch, what = max(before, during, key=lambda t: t[0] + t[1])
    out = {
        "grads": (present, "sharded gradients of every unit reduced so far (all but the embedding's and the root's)"),
        "gathered_working_set": (gathered, "FSDP2 units gathered at the end of backward (embedding unit, root)"),
        "backward_scratch": (scratch, f"FSDP2 end of backward: {what}"),
    }
    if accumulating:
        acc = arch.total_params * g
        extra = 2 * e * g if arch.tied else 0
        if acc + (last + root) * g + extra > sum(b for b, _ in out.values()):
            return {
                "grads": (acc, "unsharded gradients accumulated under no_sync (every unit, gathered dtype)"),
                "gathered_working_set": ((last + root) * g, "embedding unit and root gathered in backward"),
                "backward_scratch": (extra, "tied head: the head's and the embedding's gradients before their sum"),
            }
    return out


def fsdp_output_reduce(arch: Arch, lay: Layout, accumulating: bool) -> Held | None:
    """Bytes an untied FSDP2 rank adds at the first reduce of backward (the final norm + output head unit), beside
    every saved activation: that unit's unsharded gradient (already part of the accumulated gradients when
    accumulating), its reduce-scatter input, gloo's copy of it (CPU), the ``1/N`` output, the next unit (a decoder
    layer) prefetched (``full_shard``; ``shard_grad_op`` keeps every layer gathered until its own backward) and the
    root's gathered leftovers. None with a tied head (that unit is reduced last, :func:`fsdp_end_of_backward`)."""
    _, root, first = _units(arch)
    if not first:
        return None
    g, n = lay.gathered_bytes, lay.shards
    cpu = 1 if lay.device == "cpu" else 0
    grad = 0 if accumulating else first * g
    layers = arch.layers if lay.strategy == "fsdp_grad_op" else 1  # shard_grad_op: every layer still gathered
    prefetch = layers * arch.layer_params * g
    held = grad + first * g * (1 + cpu) + first // n * g + prefetch + root * g
    return held, "FSDP2 first reduce (final norm + head): gradient, RS input, gloo copy (CPU), output, next layer"


def ddp_synced_first_grad(arch: Arch, lay: Layout) -> Held:
    """Bytes a DDP rank adds when the first gradient of the synced (last) micro-batch arrives, with gradients
    accumulated from earlier ones: the output head's new ``V·h`` gradient (added into ``.grad`` after it exists) and,
    on CPU ranks, the reducer's gradient-sized flat bucket that MemTracker sees from the synced backward on
    (measured with a bare ``DistributedDataParallel`` on gloo: allocated in a synced backward, not under
    ``no_sync``; on GPU it is the ``ddp_buckets`` term, allocated at wrap time)."""
    head = arch.vocab * arch.hidden * lay.param_bytes
    bucket = arch.total_params * lay.param_bytes if lay.device == "cpu" else 0
    return head + bucket, "DDP synced micro-batch: the head's new gradient and (CPU) the reducer's flat bucket"
