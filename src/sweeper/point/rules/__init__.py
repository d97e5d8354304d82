"""The gate's rules, one module per kind; they run in the order of :data:`ORDER`:

- :mod:`.values`: single keys and cross-key rules of sweeper's own keys (ranges, engines, dtype pairs);
- :mod:`.passthrough`: ``training_args`` against the keys sweeper owns and the installed ``TrainingArguments``;
- :mod:`.fsdp_config`: ``fsdp_config`` against ``fsdp``, ``gc``, the model and the keys transformers reads;
- :mod:`.deepspeed_config`: ``deepspeed_config`` against ``zero``, the batch keys, ``precision``, ``training_args``
  and the keys DeepSpeed reads;
- :mod:`.launcher`: what the launcher can run (``nodes`` on the local launcher);
- :mod:`.hardware`: what the device can run under a truthful label (status ``unsupported``);
- :mod:`.known`: combinations known to fail with the installed library versions (kind ``incompatible``).

Data the rules read: :mod:`.known_keys` (passthrough keys and their sources), :mod:`.ta_schema` (the installed
``TrainingArguments`` fields). ``docs/gate.md`` lists every rule.
"""

from sweeper.point.rules import deepspeed_config, fsdp_config, hardware, known, launcher, passthrough, values

#: The modules whose rules run, in this order (a configuration error is named before a hardware limit).
ORDER = (values, passthrough, fsdp_config, deepspeed_config, launcher, hardware, known)
