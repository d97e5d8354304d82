"""The gate's rules, one module per kind; they run in the order of :data:`ORDER`:

- :mod:`.values`: single keys and cross-key rules of sweeper's own keys (ranges, engines, dtype pairs);
- :mod:`.parallelism`: the model-parallel axes ``tp``, ``sp``, ``pp`` (divisibility, one node per TP group, the
  backends that run them);
- :mod:`.cluster`: the cluster config's numbers (memory, bandwidths, price, counts) in range;
- :mod:`.passthrough`: ``training_args`` against the keys sweeper owns and the installed ``TrainingArguments``;
- :mod:`.unconsumed`: ``training_args`` entries the Trainer never reads for the point (they would change only the
  label);
- :mod:`.fsdp_config`: ``fsdp_config`` against ``fsdp``, ``gc``, the model and the keys transformers reads;
- :mod:`.deepspeed_config`: ``deepspeed_config`` against ``zero``, the batch keys, ``precision``, ``training_args``
  and the keys DeepSpeed reads;
- :mod:`.launcher`: what the launcher can run (``nodes`` on the local launcher);
- :mod:`.batch`: what ``per_device_batch_size=auto`` needs (a device capacity, the local launcher);
- :mod:`.hardware`: what the device can run under a truthful label (status ``unsupported``);
- :mod:`.known`: combinations known to fail with the installed library versions (kind ``incompatible``);
- :mod:`.planning`: with ``prune=true``, a point predicted not to fit in device memory (status ``pruned``), last so
  that a point that cannot run at all is refused as such first.

Data the rules read: :mod:`.known_keys` (passthrough keys and their sources), :mod:`.ta_schema` (the installed
``TrainingArguments`` fields). ``docs/gate.md`` lists every rule.

Floor (``docs/architecture.md``, the layers): part of ``point``, below ``job`` and above ``capacity``.
"""

from sweeper.point.rules import (
    batch,
    cluster,
    deepspeed_config,
    fsdp_config,
    hardware,
    known,
    launcher,
    parallelism,
    passthrough,
    planning,
    unconsumed,
    values,
)

#: The modules whose rules run, in this order (a configuration error is named before a hardware limit, and both
#: before a point is pruned).
ORDER = (
    values,
    parallelism,
    cluster,
    passthrough,
    unconsumed,
    fsdp_config,
    deepspeed_config,
    launcher,
    batch,
    hardware,
    known,
    planning,
)
