"""The passthrough keys the gate knows, as data, each list with its source.

- ``training_args``: which fields sweeper owns (:data:`OWNED_TRAINING_ARGS`, :data:`TIMED_WINDOW_TRAINING_ARGS`);
  the field list itself comes from the *installed* ``TrainingArguments`` (:mod:`sweeper.point.rules.ta_schema`).
- ``fsdp_config``: the keys transformers reads (:data:`FSDP_CONFIG_DEFAULTS`), which of them only FSDP1 reads.
- ``deepspeed_config``: the top-level and ``zero_optimization`` keys DeepSpeed reads, its monitors.

An unknown ``fsdp_config`` / ``deepspeed_config`` key is refused, never ignored (``docs/gate.md``): transformers
ignores an ``fsdp_config`` key it does not read and DeepSpeed an unknown top-level key, so a misspelt key would run
a point that differs from what was asked under the same label. A key missing here that a newer library reads is
added here, with its source.
"""

from __future__ import annotations

# ------------------------------------------------------------------------------------------------ training_args

#: TrainingArguments fields sweeper sets from its own keys: field -> the sweeper keys to set instead (a refusal
#: names them). Source: :func:`sweeper.job.trainer_setup.training_arguments` (mirrored in
#: :func:`sweeper.point.library_args.sweeper_training_args`).
OWNED_TRAINING_ARGS: dict[str, tuple[str, ...]] = {
    "per_device_train_batch_size": ("per_device_batch_size",),
    "per_device_eval_batch_size": ("per_device_batch_size",),
    "gradient_accumulation_steps": ("grad_accum",),
    "fsdp": ("fsdp",),
    "fsdp_config": ("fsdp_config",),
    "deepspeed": ("zero", "deepspeed_config"),
    "bf16": ("precision",),
    "fp16": ("precision",),
    "gradient_checkpointing": ("gc",),
    "activation_checkpointing": ("gc",),
    "gradient_checkpointing_kwargs": ("use_reentrant",),
    "activation_checkpointing_kwargs": ("use_reentrant",),
    "max_steps": ("warmup_steps", "timed_steps", "memory_steps", "profile_steps"),
    "seed": ("seed",),
    "data_seed": ("seed",),
    "output_dir": ("hydra.sweep.dir",),
    "use_cpu": ("device",),
    "ddp_timeout": ("timeout_s",),
    "eval_accumulation_steps": ("eval",),
    "local_rank": ("ranks_per_node", "nodes"),
    "parallelism_config": ("tp", "sp"),
}

#: TrainingArguments fields that would run tracking, saving, logging or evaluation inside the timed window (or
#: change what sweeper logs and measures): sweeper owns them. Fields starting with one of
#: :data:`TIMED_WINDOW_PREFIXES` count too (``logging_dir`` of older transformers, ``hub_model_id``, ...).
#: Source: ``docs/measurement.md`` (nothing runs in the timed window; trackers run on the driver from the records),
#: docs/cases.md#t06; field names from the transformers 5 ``TrainingArguments`` docs.
TIMED_WINDOW_TRAINING_ARGS: frozenset[str] = frozenset(
    {
        "report_to",
        "run_name",
        "project",
        "disable_tqdm",
        "push_to_hub",
        "log_on_each_node",
        "eval_strategy",
        "evaluation_strategy",
        "eval_steps",
        "eval_delay",
        "eval_on_start",
        "load_best_model_at_end",
        "metric_for_best_model",
        "greater_is_better",
        "resume_from_checkpoint",
        "enable_jit_checkpoint",
        "overwrite_output_dir",
        "skip_memory_metrics",
        "include_num_input_tokens_seen",
        "include_tokens_per_second",
    }
)
TIMED_WINDOW_PREFIXES: tuple[str, ...] = ("logging_", "save_", "hub_", "trackio_")

# ------------------------------------------------------------------------------------------------ fsdp_config

#: Every ``fsdp_config`` key transformers reads, with the value it uses when the key is absent (None: no default).
#: A key may also be spelled with an ``fsdp_`` prefix (transformers strips it). Source: transformers 5
#: ``TrainingArguments._process_fsdp_args`` and the ``fsdp_config`` entry of the ``TrainingArguments`` docs.
FSDP_CONFIG_DEFAULTS: dict[str, object] = {
    "version": 2,
    "min_num_params": 0,
    "transformer_layer_cls_to_wrap": None,
    "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
    "cpu_offload": False,
    "cpu_ram_efficient_loading": False,
    "state_dict_type": "FULL_STATE_DICT",
    "activation_checkpointing": False,
    "reshard_after_forward": None,  # decided by the strategy: see sweeper.point.library_args.sweeper_fsdp_config
    "xla": False,
    "xla_fsdp_v2": False,
    "xla_fsdp_grad_ckpt": False,
    "xla_fsdp_settings": None,
    # read only for FSDP1 (fsdp_config version 1: hybrid_shard in sweeper)
    "forward_prefetch": False,
    "backward_prefetch": "NO_PREFETCH",
    "use_orig_params": True,
    "sync_module_states": True,
    "limit_all_gathers": None,
}

#: The keys of :data:`FSDP_CONFIG_DEFAULTS` transformers reads only for FSDP1; under FSDP2 (``full_shard``,
#: ``shard_grad_op``) it ignores them. Source: as above (the ``else`` branch for version 1).
FSDP1_ONLY_KEYS: frozenset[str] = frozenset(
    {"forward_prefetch", "backward_prefetch", "use_orig_params", "sync_module_states", "limit_all_gathers"}
)

#: accelerate's FSDP1 ``sharding_strategy`` names, in its numbering (1-based). Source:
#: ``accelerate.utils.constants.FSDP_SHARDING_STRATEGY``. transformers 5 does not read ``sharding_strategy`` (it
#: derives the strategy from ``fsdp``); the gate still holds it to the label.
FSDP_SHARDING_STRATEGIES: tuple[str, ...] = (
    "FULL_SHARD",
    "SHARD_GRAD_OP",
    "NO_SHARD",
    "HYBRID_SHARD",
    "HYBRID_SHARD_ZERO2",
)

# ------------------------------------------------------------------------------------------------ deepspeed_config

#: Top-level DeepSpeed config keys. Source: the DeepSpeed config JSON docs (https://www.deepspeed.ai/docs/config-json/)
#: and ``deepspeed/runtime/config.py`` of DeepSpeed 0.17-0.19 (some older blocks, e.g. ``amp`` or
#: ``curriculum_learning``, are refused by DeepSpeed 0.19 itself).
DEEPSPEED_TOP_KEYS: frozenset[str] = frozenset(
    {
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "optimizer",
        "scheduler",
        "fp16",
        "bf16",
        "bfloat16",
        "amp",
        "torch_autocast",
        "gradient_clipping",
        "prescale_gradients",
        "gradient_predivide_factor",
        "gradient_allreduce_op",
        "communication_data_type",
        "seq_parallel_communication_data_type",
        "sparse_gradients",
        "zero_optimization",
        "zero_allow_untested_optimizer",
        "zero_force_ds_cpu_optimizer",
        "steps_per_print",
        "wall_clock_breakdown",
        "memory_breakdown",
        "dump_state",
        "disable_allgather",
        "disable_python_gc",
        "managed_gradient_accumulation",
        "flops_profiler",
        "activation_checkpointing",
        "comms_logger",
        "tensorboard",
        "wandb",
        "csv_monitor",
        "comet",
        "autotuning",
        "aio",
        "elasticity",
        "data_efficiency",
        "curriculum_learning",
        "compression_training",
        "checkpoint",
        "data_types",
        "dataloader_drop_last",
        "log_level",
        "pipeline",
        "hybrid_engine",
        "weight_quantization",
        "compile",
        "timers",
        "tensor_parallel",
        "expert_parallel",
        "sequence_parallel_size",
        "use_data_before_expert_parallelism",
        "datastates_ckpt",
        "nebula",
    }
)

#: ``zero_optimization`` keys (field names and aliases of DeepSpeed's ``DeepSpeedZeroConfig``, which itself refuses
#: any other key at setup). Source: ``deepspeed/runtime/zero/config.py`` of DeepSpeed 0.19 and the docs above.
DEEPSPEED_ZERO_KEYS: frozenset[str] = frozenset(
    {
        "stage",
        "allgather_partitions",
        "allgather_bucket_size",
        "allgather_sequential",
        "overlap_comm",
        "reduce_scatter",
        "reduce_bucket_size",
        "contiguous_gradients",
        "offload_param",
        "offload_optimizer",
        "cpu_offload",
        "cpu_offload_param",
        "cpu_offload_use_pin_memory",
        "sub_group_size",
        "elastic_checkpoint",
        "load_from_fp32_weights",
        "round_robin_gradients",
        "ignore_unused_parameters",
        "legacy_stage1",
        "memory_efficient_linear",
        "compute_grad_norm",
        "enable_sanity_checks",
        "leaf_module",
        "log_trace_cache_warnings",
        "override_module_apply",
        "parameter_alignment",
        "pipeline_loading_checkpoint",
        "save_muon_momentum_buffer_in_memory",
        "use_multi_rank_bucket_allreduce",
        "zenflow",
        "zero_hpz_partition_size",
        "zero_quantized_weights",
        "zero_quantized_nontrainable_weights",
        "zero_quantized_gradients",
        "mics_shard_size",
        "mics_hierarchical_params_gather",
        "max_live_parameters",
        "stage3_max_live_parameters",
        "max_reuse_distance",
        "stage3_max_reuse_distance",
        "prefetch_bucket_size",
        "stage3_prefetch_bucket_size",
        "param_persistence_threshold",
        "stage3_param_persistence_threshold",
        "model_persistence_threshold",
        "stage3_model_persistence_threshold",
        "module_granularity_threshold",
        "stage3_module_granularity_threshold",
        "gather_16bit_weights_on_model_save",
        "stage3_gather_16bit_weights_on_model_save",
        "stage3_gather_fp16_weights_on_model_save",
        "use_all_reduce_for_fetch_params",
        "stage3_use_all_reduce_for_fetch_params",
        "stage3_allgather_sequential",
    }
)

#: DeepSpeed blocks that track, profile or log while training (each has ``enabled``), and flags that time or dump
#: every step: they would run inside the timed window. Source: DeepSpeed config JSON docs (Monitoring, Flops
#: Profiler, Communication Logging, Logging).
DEEPSPEED_MONITOR_BLOCKS: tuple[str, ...] = (
    "tensorboard",
    "wandb",
    "csv_monitor",
    "comet",
    "flops_profiler",
    "comms_logger",
)
DEEPSPEED_MONITOR_FLAGS: tuple[str, ...] = ("wall_clock_breakdown", "memory_breakdown", "dump_state")
