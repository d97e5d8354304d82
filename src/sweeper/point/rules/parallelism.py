"""Rules on the model-parallel axes ``tp``, ``sp`` and ``pp`` (docs/parallelism.md).

Which backend runs each axis, and so what these rules guard: ``tp > 1`` without FSDP is DeepSpeed AutoTP
(``tensor_parallel.autotp_size``) at ZeRO stage 0, 1 or 2; FSDP x TP (transformers' ``DistributedConfig``) and
Ulysses ``sp > 1`` are not measured by this version; ``pp > 1`` is never a sweep point, because the HF Trainer has
no pipeline training path. Facts and sources: ``../shared/notes/parallelism.md`` as checked against
the installed packages (the sources named in each rule).
"""

from __future__ import annotations

from sweeper.capacity.arch import Arch, UnknownArchitecture
from sweeper.config.spec import PointSpec
from sweeper.config.target import Target
from sweeper.point.gate import rule

#: The parallelism degrees, as the command line spells them.
DEGREES = ("tp", "sp", "pp")


@rule("T01", DEGREES, "tp, sp and pp are whole numbers of at least 1 (1 = off)", "schema")
def _degrees(spec: PointSpec, _: Target):
    for key in DEGREES:
        value = getattr(spec, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"{key}={value!r} must be a whole number of at least 1 (1 = no {_NAMES[key]})", (key,)
    return None


_NAMES = {"tp": "tensor parallelism", "sp": "sequence parallelism", "pp": "pipeline parallelism"}


@rule(
    "T02",
    ("pp",),
    "pp > 1 is refused in a sweep (the HF Trainer has no pipeline training path): plan it with sweeper.plan",
    "transformers DistributedConfig(pp_size) runs forward only; accelerate's prepare_pippy is inference only; "
    "DeepSpeed PipelineModule needs its own engine loop (../shared/notes/parallelism.md)",
    status="unsupported",
)
def _pipeline(spec: PointSpec, _: Target):
    if spec.pp == 1:
        return None
    return (
        f"pp={spec.pp}: the Hugging Face Trainer cannot train a pipeline-parallel model (transformers' "
        "DistributedConfig(pp_size) runs the forward only, accelerate's pipeline support is inference only, and "
        "DeepSpeed's PipelineModule needs its own training loop), so there is nothing to measure; use pp=1, and plan "
        f"the pipeline instead: python -m sweeper.plan model={spec.model} cluster=<name> seq_len={spec.seq_len} "
        f"pp={spec.pp} grad_accum=<micro-batches> (docs/parallelism.md)",
        ("pp",),
    )


@rule(
    "T03",
    ("tp", "sp", "ranks_per_node", "nodes"),
    "tp x sp divides the world size (ranks_per_node x nodes): dp = world / (tp x sp)",
    "DeepSpeed groups (data-parallel world = world / (tp x sp)); accelerate ParallelismConfig (total_size)",
)
def _divides_world(spec: PointSpec, _: Target):
    model_parallel = spec.tp * spec.sp
    if spec.world_size % model_parallel == 0:
        return None
    # a fix that the other rules accept too: degrees dividing both these ranks and the model's heads (T04, T05)
    heads = heads_of(spec)
    fits = [
        d
        for d in range(2, spec.world_size + 1)
        if spec.world_size % d == 0 and (heads is None or (heads[0] % d == 0 and heads[1] % d == 0))
    ]
    tps = [d for d in fits if spec.ranks_per_node % d == 0]

    def choice(key: str, values: list[int]) -> str:
        return f"{key}={values[0]}" if len(values) == 1 else f"{key} in {', '.join(map(str, values))}"

    fixes = []
    if tps and spec.sp == 1:
        fixes.append(f"{choice('tp', tps)} on these ranks")
    if fits and spec.tp == 1 and spec.sp > 1:
        fixes.append(f"{choice('sp', fits)} on these ranks")
    whole = heads is None or all(h % d == 0 for h in heads for d in (spec.tp, spec.sp))
    note = ""
    if whole:
        fixes.append(f"ranks_per_node x nodes a multiple of {model_parallel}")
    else:
        note = f" (more ranks would not help: {model_parallel} does not divide model={spec.model}'s heads)"
    return (
        f"tp={spec.tp} x sp={spec.sp} = {model_parallel} does not divide the {spec.world_size} ranks "
        f"(ranks_per_node={spec.ranks_per_node} x nodes={spec.nodes}): the data-parallel degree world / (tp x sp) "
        f"must be a whole number; use {'; or '.join(fixes) or 'tp=1 sp=1'}{note}",
        ("tp", "sp", "ranks_per_node", "nodes"),
    )


@rule(
    "T04",
    ("tp", "ranks_per_node"),
    "a TP group is ranks of one node: tp divides ranks_per_node",
    "TP all-reduces twice per layer forward and twice backward (Megatron-LM, Shoeybi et al. 2019): it needs the "
    "intra-node link; DeepSpeed and torch build TP groups of consecutive ranks",
)
def _tp_in_node(spec: PointSpec, _: Target):
    if spec.tp == 1 or spec.ranks_per_node % spec.tp == 0:
        return None
    return (
        f"tp={spec.tp} with ranks_per_node={spec.ranks_per_node}: a tensor-parallel group must be ranks of one node "
        "(TP all-reduces every layer's activations, twice forward and twice backward: across the network that "
        f"costs more than it saves), so tp must divide ranks_per_node; use tp<={spec.ranks_per_node} dividing it",
        ("tp", "ranks_per_node"),
    )


def heads_of(spec: PointSpec) -> tuple[int, int] | None:
    """(attention heads, key/value heads) of the point's model, or None for a ``model_type`` the capacity model
    does not read (then the pre-flight asks transformers' config: :mod:`sweeper.job.preflight_checks`)."""
    try:
        arch = Arch.from_config(spec.model_type, spec.model_config)
    except (UnknownArchitecture, KeyError, TypeError, ValueError):
        return None
    return arch.heads, arch.kv_heads


@rule(
    "T05",
    ("tp", "sp", "model"),
    "tp divides the attention heads and the key/value heads; sp divides the attention heads",
    "DeepSpeed AutoTP shards q/k/v by heads (runtime/engine.py: ranks past the KV head count hold no attention "
    "shard); Ulysses all-to-all scatters heads (deepspeed/sequence/layer.py)",
)
def _heads(spec: PointSpec, _: Target):
    heads = heads_of(spec)
    if heads is None or (spec.tp == 1 and spec.sp == 1):
        return None
    a, kv = heads
    for key, degree, count, what in (
        ("tp", spec.tp, a, "attention heads"),
        ("tp", spec.tp, kv, "key/value heads (num_key_value_heads)"),
        ("sp", spec.sp, a, "attention heads"),
    ):
        if degree > 1 and count % degree:
            fits = [d for d in range(1, count + 1) if count % d == 0 and d <= 64]
            return (
                f"{key}={degree} does not divide model={spec.model}'s {count} {what}: each rank must hold whole "
                f"heads; use {key} in {', '.join(map(str, fits))}",
                (key, "model"),
            )
    return None


@rule(
    "T06",
    ("sp", "seq_len"),
    "sp divides seq_len (each rank holds seq_len / sp tokens of every sample)",
    "DeepSpeed Ulysses (UlyssesSPDataLoaderAdapter shards the sequence evenly)",
)
def _sequence_split(spec: PointSpec, _: Target):
    if spec.sp == 1 or spec.seq_len % spec.sp == 0:
        return None
    return (
        f"sp={spec.sp} does not divide seq_len={spec.seq_len}: Ulysses gives each rank seq_len / sp tokens of every "
        f"sample; use a seq_len that is a multiple of {spec.sp}",
        ("sp", "seq_len"),
    )


@rule(
    "T07",
    ("tp", "zero"),
    "DeepSpeed AutoTP trains with ZeRO 0, 1 or 2, not 3",
    "transformers integrations/deepspeed.py ('Weight conversions ... with DeepSpeed Tensor Parallelism are not yet "
    "implemented'); zero.Init's 'auto' batch mismatch at load (../shared/notes/parallelism.md, measured)",
    kind="incompatible",
)
def _autotp_zero3(spec: PointSpec, _: Target):
    if spec.tp == 1 or spec.zero != 3 or spec.fsdp != "none":
        return None
    return (
        f"tp={spec.tp} with zero=3: DeepSpeed AutoTP does not train under ZeRO-3 through the HF Trainer (zero.Init "
        "builds the model before AutoTP can shard it: transformers raises 'Weight conversions ... with DeepSpeed "
        "Tensor Parallelism are not yet implemented', and the 'auto' batch sizes mismatch at load); use zero=1 or "
        "zero=2 with tp, or tp=1 with zero=3",
        ("tp", "zero"),
    )


@rule(
    "T08",
    ("tp", "fsdp"),
    "FSDP x TP (2-D) is not measured by this version: tp > 1 runs on DeepSpeed AutoTP, with fsdp=none",
    "docs/parallelism.md (what each axis runs on)",
    status="unsupported",
)
def _fsdp_tp(spec: PointSpec, _: Target):
    if spec.tp == 1 or spec.fsdp == "none":
        return None
    return (
        f"tp={spec.tp} with fsdp={spec.fsdp}: 2-D FSDP x TP (transformers' DistributedConfig(tp_size, fsdp_size)) "
        "is not measured by this version of sweeper; tensor parallelism runs on DeepSpeed AutoTP: use fsdp=none "
        f"with zero=0|1|2 and tp={spec.tp} (ZeRO shards over the data-parallel ranks as FSDP would)",
        ("tp", "fsdp"),
    )


@rule(
    "T09",
    ("sp", "fsdp", "tp"),
    "sp > 1 runs on DeepSpeed Ulysses: with fsdp=none, and not together with tp > 1 (not measured)",
    "accelerate ParallelismConfig (sp_backend='deepspeed'; CP and SP exclusive); docs/parallelism.md",
    status="unsupported",
)
def _ulysses(spec: PointSpec, _: Target):
    if spec.sp == 1:
        return None
    if spec.fsdp != "none":
        return (
            f"sp={spec.sp} with fsdp={spec.fsdp}: Ulysses sequence parallelism runs on DeepSpeed (accelerate's "
            "sp_backend='deepspeed'); use fsdp=none with zero=0|1|2|3",
            ("sp", "fsdp"),
        )
    if spec.tp > 1:
        return (
            f"sp={spec.sp} with tp={spec.tp}: DeepSpeed AutoTP and Ulysses together are not measured by this "
            "version of sweeper; use one of them (tp=1 or sp=1)",
            ("sp", "tp"),
        )
    return None


#: The planner's rule for a pipeline (``pp > 1`` is planned, never swept: rule T02 refuses it in a sweep).
PIPELINE_RULE = "T11"


def pipeline_check(spec: PointSpec) -> None:
    """What a pipeline-parallel plan point needs, as DeepSpeed's ``PipelineModule`` trains it (the engine the planner
    models for ``pp > 1``): ``pp`` divides the layers (even stages), ``tp x sp x pp`` divides the world, no FSDP
    (transformers rejects FSDP with pipeline parallelism), ZeRO 0 or 1 ("ZeRO-2 and ZeRO-3 are incompatible with
    pipeline parallelism", ``deepspeed/runtime/pipe/engine.py``), no Ulysses (not modelled together). Nothing for
    ``pp=1``.

    Raises:
        sweeper.point.gate.InvalidPoint: rule T11, naming the keys.
    """
    from sweeper.point.gate import InvalidPoint

    if spec.pp == 1:
        return
    try:
        layers = Arch.from_config(spec.model_type, spec.model_config).layers
    except (UnknownArchitecture, KeyError, TypeError, ValueError):
        layers = None
    found: tuple[str, tuple[str, ...]] | None = None
    if layers is not None and layers % spec.pp:
        found = (
            f"pp={spec.pp} does not divide model={spec.model}'s {layers} layers: stages of whole, equal layers",
            ("pp", "model"),
        )
    elif spec.world_size % (spec.tp * spec.sp * spec.pp):
        found = (
            f"tp={spec.tp} x sp={spec.sp} x pp={spec.pp} does not divide the {spec.world_size} ranks (ranks_per_node x "
            "nodes): the data-parallel degree must be whole",
            ("pp", "tp", "sp", "ranks_per_node", "nodes"),
        )
    elif spec.fsdp != "none":
        found = (
            f"pp={spec.pp} with fsdp={spec.fsdp}: transformers rejects FSDP with pipeline parallelism; plan fsdp=none "
            "zero=0|1",
            ("pp", "fsdp"),
        )
    elif spec.zero > 1:
        found = (
            f"pp={spec.pp} with zero={spec.zero}: DeepSpeed's pipeline engine refuses it ('ZeRO-2 and ZeRO-3 are "
            "incompatible with pipeline parallelism'); plan zero=0 or zero=1",
            ("pp", "zero"),
        )
    elif spec.sp > 1:
        found = (f"pp={spec.pp} with sp={spec.sp}: a pipeline with Ulysses is not modelled; plan sp=1", ("pp", "sp"))
    if found is not None:
        raise InvalidPoint(found[0], found[1], status="invalid", rule=PIPELINE_RULE)
