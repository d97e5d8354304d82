"""Failure classification: every failure becomes a result with a reason a person can act on."""

from __future__ import annotations

import json
import traceback

import pytest

from sweeper.failures import (
    ERROR_KINDS,
    KNOWN_INCOMPATIBLE,
    OomInfo,
    classify,
    format_bytes,
    infer_phase,
    known_incompatible,
    parse_oom,
    parse_size,
)

MiB, GiB = 2**20, 2**30

# The seed message (cases/public.md), one line as torch >= 2.2 prints it.
SEED = (
    "CUDA out of memory. Tried to allocate 340.00 MiB. GPU 1 has a total capacity of 94.97 GiB of which 17.69 MiB "
    "is free. Including non-PyTorch memory, this process has 94.95 GiB memory in use. Of the allocated memory "
    "86.44 GiB is allocated by PyTorch, and 7.53 GiB is reserved by PyTorch but unallocated. If reserved but "
    "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)

# Each expected byte count is round(value * 2**k) of the printed value (exact decimal product, ties to even).
SEED_BYTES = {
    "requested_bytes": 356515840,  # 340.00 MiB
    "device_index": 1,
    "device_kind": "cuda",
    "capacity_bytes": 101973261025,  # 94.97 GiB
    "free_bytes": 18549309,  # 17.69 MiB
    "in_use_bytes": 101951786189,  # 94.95 GiB
    "allocated_bytes": 92814243267,  # 86.44 GiB
    "reserved_unallocated_bytes": 8085275935,  # 7.53 GiB
    "reserved_total_bytes": None,  # this wording does not print it
    "other_process_bytes": None,
}


def training_traceback(*inner: str, exc: str = "torch.OutOfMemoryError: CUDA out of memory.") -> str:
    """A Trainer traceback: train -> _inner_training_loop -> the given innermost frames (file:line:function)."""
    frames = [
        ("/job/sweeper/job.py", 88, "run_point"),
        ("/venv/lib/python3.11/site-packages/transformers/trainer.py", 1412, "train"),
        ("/venv/lib/python3.11/site-packages/transformers/trainer.py", 1602, "_inner_training_loop"),
    ]
    for spec in inner:
        path, line, func = spec.split(":")
        frames.append((path, int(line), func))
    body = "".join(f'  File "{p}", line {n}, in {f}\n    pass\n' for p, n, f in frames)
    return f"Traceback (most recent call last):\n{body}{exc}\n"


# --------------------------------------------------------------------------------------------------- parse_oom


def test_the_seed_message_parses_to_exact_bytes_with_a_fragmentation_hint():
    info = parse_oom("torch.OutOfMemoryError: " + SEED)
    assert info is not None
    for name, expected in SEED_BYTES.items():
        assert getattr(info, name) == expected, name
    assert info.fragmentation_hint  # 7.53 GiB reserved but unallocated > 1 GiB
    assert info.device == "cuda:1"
    assert json.loads(json.dumps(info.to_dict()))["capacity_bytes"] == 101973261025


def test_the_seed_message_wrapped_over_lines_parses_the_same():
    wrapped = SEED.replace(" GiB of which", " GiB of which\n").replace("memory 86.44", "memory\n86.44")
    assert parse_oom(wrapped) == parse_oom(SEED)


def test_fields_are_found_whatever_their_order():
    reordered = (
        "Of the allocated memory 86.44 GiB is allocated by PyTorch, and 7.53 GiB is reserved by PyTorch but "
        "unallocated. CUDA out of memory. GPU 1 has a total capacity of 94.97 GiB of which 17.69 MiB is free. "
        "Tried to allocate 340.00 MiB."
    )
    info = parse_oom(reordered)
    assert (info.requested_bytes, info.capacity_bytes, info.allocated_bytes) == (
        356515840,
        101973261025,
        92814243267,
    )
    assert info.in_use_bytes is None


def test_torch_1_5_to_2_0_wording():
    # Older CUDACachingAllocator wording, e.g. quoted in github.com/pytorch/pytorch/issues/59778 and
    # OPIXray-author/OPIXray#5; this one from a user script's comment.
    msg = (
        "RuntimeError: CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB total capacity; 130.35 MiB "
        "already allocated; 47.06 MiB free; 188.00 MiB reserved in total by PyTorch) If reserved memory is >> "
        "allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory "
        "Management and PYTORCH_CUDA_ALLOC_CONF"
    )
    info = parse_oom(msg)
    assert info == OomInfo(
        requested_bytes=37748736,  # 36.00 MiB
        device_index=0,
        device_kind="cuda",
        capacity_bytes=8514772664,  # 7.93 GiB
        free_bytes=49345987,  # 47.06 MiB
        allocated_bytes=136681882,  # 130.35 MiB
        reserved_total_bytes=197132288,  # 188.00 MiB
        fragmentation_hint=False,  # 57.65 MiB reserved-unallocated: small, although the message advises splitting
    )
    assert info.unallocated_reserved_estimate == 197132288 - 136681882


def test_torch_1_0_wording_with_cached():
    # pytorch/pytorch#16417 (torch 1.0: "cached" before it was renamed "reserved").
    msg = (
        "RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB total capacity; "
        "8.57 MiB already allocated; 9.28 GiB free; 4.68 MiB cached)"
    )
    info = parse_oom(msg)
    assert (info.requested_bytes, info.capacity_bytes, info.allocated_bytes) == (
        13107200,
        11725260718,
        8986296,
    )
    assert (info.free_bytes, info.reserved_total_bytes) == (9964324127, 4907336)


def test_torch_2_1_wording_with_typo_and_other_process():
    # torch 2.1 ("total capacty", sic), quoted in FoundationVision/GenerateU#10: the process is named by PID.
    msg = (
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 496.00 MiB. GPU 0 has a total capacty "
        "of 14.75 GiB of which 235.06 MiB is free. Process 20398 has 14.52 GiB memory in use. Of the allocated "
        "memory 14.06 GiB is allocated by PyTorch, and 330.42 MiB is reserved by PyTorch but unallocated. If "
        "reserved but unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  See "
        "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
    )
    info = parse_oom(msg)
    assert (info.requested_bytes, info.capacity_bytes, info.free_bytes) == (520093696, 15837691904, 246478275)
    assert (info.in_use_bytes, info.other_process_bytes) == (None, 15590731284)  # 14.52 GiB
    assert (info.allocated_bytes, info.reserved_unallocated_bytes) == (15096810045, 346470482)
    assert info.fragmentation_hint is False  # 330.42 MiB < 1 GiB and < 10 % of 14.75 GiB


def test_newer_wording_without_fragmentation_is_not_flagged_despite_the_advice():
    # torch >= 2.2 wording from pytorch/pytorch#16417 (2024 comment): every message carries the
    # expandable_segments advice, so only the numbers decide the hint.
    msg = (
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total capacity "
        "of 23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process has 23.60 GiB memory "
        "in use. Of the allocated memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch "
        "but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
    )
    info = parse_oom(msg)
    assert (info.requested_bytes, info.capacity_bytes, info.free_bytes) == (23068672, 25393994138, 11597251)
    assert (info.in_use_bytes, info.allocated_bytes) == (25340307046, 24588687770)
    assert info.reserved_unallocated_bytes == 204336005
    assert info.fragmentation_hint is False


def test_fragmentation_hint_over_ten_percent_of_a_small_card():
    msg = (
        "CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total capacity of 4.00 GiB of which 0 bytes "
        "is free. Of the allocated memory 2.58 GiB is allocated by PyTorch, and 512.00 MiB is reserved by PyTorch "
        "but unallocated."
    )
    info = parse_oom(msg)
    assert info.free_bytes == 0 and info.reserved_unallocated_bytes == 512 * MiB
    assert info.fragmentation_hint  # 512 MiB > 10 % of 4 GiB, though < 1 GiB


def test_cpu_allocator_wordings():
    # c10/core/impl/alloc_cpu.cpp (Linux) and its Windows variant (lllyasviel/Fooocus#237).
    linux = (
        "[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
        "allocate 132426121216 bytes. Error code 12 (Cannot allocate memory)"
    )
    windows = "[enforce fail at alloc_cpu.cpp:72] data. DefaultCPUAllocator: not enough memory: you tried to allocate 26214400 bytes."
    for msg, n in ((linux, 132426121216), (windows, 26214400)):
        info = parse_oom(msg)
        assert info == OomInfo(requested_bytes=n, device_kind="cpu")


def test_other_accelerators():
    # MPS: Comfy-Org/ComfyUI#7440; the older "GB" labels are decimal when taken literally (pytorch/pytorch#96814).
    mps = parse_oom(
        "MPS backend out of memory (MPS allocated: 9.57 GiB, other allocations: 17.35 GiB, max allowed: 27.20 GiB). "
        "Tried to allocate 292.50 MiB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper "
        "limit for memory allocations (may cause system failure)."
    )
    assert (mps.device_kind, mps.device_index) == ("mps", None)
    assert (mps.requested_bytes, mps.allocated_bytes, mps.capacity_bytes) == (
        306708480,
        10275709256,
        29205777613,
    )
    old_mps = parse_oom(
        "MPS backend out of memory (MPS allocated: 7.43 GB, other allocations: 24.46 GB, max allowed: 32.00 GB). Tried to allocate 129.21 MB on private pool."
    )
    assert (old_mps.requested_bytes, old_mps.capacity_bytes) == (129210000, 32 * 10**9)
    # Ascend NPU (torch_npu, xingchensong/TouchNet#100): the old CUDA layout plus "current active".
    npu = parse_oom(
        "RuntimeError: NPU out of memory. Tried to allocate 5.03 GiB (NPU 3; 60.96 GiB total capacity; 49.47 GiB "
        "already allocated; 49.47 GiB current active; 1.32 GiB free; 57.55 GiB reserved in total by PyTorch)"
    )
    assert (npu.device_kind, npu.device_index, npu.requested_bytes) == ("npu", 3, 5400921375)
    assert (npu.allocated_bytes, npu.free_bytes, npu.reserved_total_bytes) == (
        53118008033,
        1417339208,
        61793841971,
    )
    assert npu.fragmentation_hint  # 8.08 GiB reserved beyond what is allocated
    # Intel XPU, new sentence form (intel/torch-xpu-ops#3011).
    xpu = parse_oom(
        "XPU out of memory. Tried to allocate 4.66 GiB. GPU 0 has a total capacity of 5.65 GiB of which 5.65 GiB "
        "is free. Of the allocated memory 195.50 KiB is allocated by PyTorch, and 1.81 MiB is reserved by PyTorch "
        "but unallocated."
    )
    assert (xpu.device_kind, xpu.device_index, xpu.allocated_bytes) == ("xpu", 0, 200192)
    # ROCm says HIP; torch calls the device cuda.
    assert (
        parse_oom("HIP out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 63.98 GiB").device
        == "cuda:3"
    )
    # Wordings without numbers.
    assert (
        parse_oom("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported").device_kind
        == "cuda"
    )
    assert parse_oom("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`").device_kind == "cuda"


@pytest.mark.parametrize(
    "message",
    [
        "",
        "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
        (
            "torch.utils.checkpoint: Recomputed values for the following tensors have different metadata than during "
            "the forward pass."
        ),
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:41263",
        "Tried to allocate a new rendezvous handler",
    ],
)
def test_non_oom_messages_return_none(message):
    assert parse_oom(message) is None


# ------------------------------------------------------------------------------------------- sizes and display


@pytest.mark.parametrize(
    "text, expected",
    [
        ("340.00 MiB", 356515840),
        ("94.97 GiB", 101973261025),
        ("0 bytes", 0),
        ("1 byte", 1),
        ("512 B", 512),
        ("1.5 B", 2),  # half rounds to even
        ("2.5 B", 2),
        ("1024.00 KiB", MiB),
        ("2 TiB", 2 * 2**40),
        ("5GB", 5 * 10**9),  # decimal label taken literally
        ("129.21 MB", 129210000),
        ("1 KB", 1000),
        ("1 kb", 1000),
        ("  7.53 gib ", 8085275935),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text", ["", "MiB", "12", "-1 MiB", "1.2.3 GiB", "12 parsecs", "nan GiB", "1e3 MiB", "1,024 B"]
)
def test_parse_size_rejects_garbage(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_parse_size_rejects_non_strings():
    with pytest.raises(TypeError):
        parse_size(340)  # type: ignore[arg-type]


def test_format_bytes_uses_labelled_binary_units():
    assert format_bytes(356515840) == "340.00 MiB"
    assert format_bytes(101973261025) == "94.97 GiB"
    assert format_bytes(18549309) == "17.69 MiB"
    assert format_bytes(0) == "0 B" and format_bytes(1023) == "1023 B" and format_bytes(1024) == "1.00 KiB"
    assert format_bytes(3 * 2**40) == "3.00 TiB"
    assert format_bytes(None) == "n/a"
    assert format_bytes(-2 * GiB) == "-2.00 GiB"


# ------------------------------------------------------------------------------------------------- classify


def test_the_seed_oom_in_training_is_an_oom_result_with_an_actionable_reason():
    tb = training_traceback(
        "/venv/lib/python3.11/site-packages/transformers/trainer.py:1850:training_step",
        "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py:125:forward",
        exc="torch.OutOfMemoryError: " + SEED,
    )
    f = classify("OutOfMemoryError", SEED, tb)
    assert (f.status, f.error_kind, f.phase) == ("oom", None, "train")
    assert f.reason == (
        "out of memory on cuda:1 while trying to allocate 340.00 MiB (17.69 MiB free of 94.97 GiB; 7.53 GiB reserved "
        "but unallocated: fragmentation, try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)"
    )
    assert f.details["oom"]["requested_bytes"] == 356515840
    assert f.details["traceback_tail"].endswith(SEED)
    json.dumps(f.to_dict())


def test_fake_gpu_real_torch_out_of_memory_error_is_classified():
    torch = pytest.importorskip("torch")
    try:
        raise torch.OutOfMemoryError(SEED)
    except torch.OutOfMemoryError as e:
        f = classify(type(e).__name__, str(e), traceback.format_exc())
    assert f.status == "oom"
    assert {k: f.details["oom"][k] for k in SEED_BYTES} == SEED_BYTES
    assert f.details["oom"]["fragmentation_hint"] is True
    assert "torch.OutOfMemoryError" in f.details["traceback_tail"]
    assert classify("torch.cuda.OutOfMemoryError", SEED).status == "oom"


def test_host_oom_and_memory_error_are_ooms():
    f = classify("RuntimeError", "DefaultCPUAllocator: can't allocate memory: you tried to allocate 123456 bytes.")
    assert f.status == "oom" and f.details["oom"]["requested_bytes"] == 123456
    assert f.reason.startswith("out of memory on the host (CPU) while trying to allocate 120.56 KiB")
    bare = classify("MemoryError", "")
    assert bare.status == "oom" and bare.details["oom"]["device_kind"] == "cpu"


def test_p05_eval_oom_is_told_apart_from_training():
    tb = training_traceback(
        "/venv/lib/python3.11/site-packages/transformers/trainer.py:2350:_maybe_log_save_evaluate",
        "/venv/lib/python3.11/site-packages/transformers/trainer.py:2427:_evaluate",
        "/venv/lib/python3.11/site-packages/transformers/trainer.py:3190:evaluate",
        "/venv/lib/python3.11/site-packages/transformers/trainer.py:3398:evaluation_loop",
        "/venv/lib/python3.11/site-packages/transformers/trainer_pt_utils.py:124:nested_concat",
        "/venv/lib/python3.11/site-packages/transformers/trainer_pt_utils.py:86:torch_pad_and_concatenate",
        exc="torch.OutOfMemoryError: " + SEED,
    )
    f = classify("OutOfMemoryError", SEED, tb)
    assert (f.status, f.phase) == ("oom", "eval")
    assert "during evaluation" in f.reason and "eval_accumulation_steps" in f.reason
    assert classify("OutOfMemoryError", SEED, tb, phase="train").phase == "train"  # the caller knows better


P01_MESSAGE = (
    "torch.utils.checkpoint: Recomputed values for the following tensors have different metadata than during the "
    "forward pass.\ntensor at position 12:\nsaved metadata: {'shape': torch.Size([4096, 4096]), 'dtype': "
    "torch.bfloat16, 'device': device(type='cuda', index=0)}\nrecomputed metadata: {'shape': "
    "torch.Size([8388608]), 'dtype': torch.bfloat16, 'device': device(type='cuda', index=0)}\n"
)
BACKWARD_FRAMES = (
    "/venv/lib/python3.11/site-packages/transformers/trainer.py:1870:training_step",
    "/venv/lib/python3.11/site-packages/accelerate/accelerator.py:2241:backward",
    "/venv/lib/python3.11/site-packages/torch/autograd/graph.py:825:_engine_run_backward",
    "/venv/lib/python3.11/site-packages/torch/utils/checkpoint.py:1129:unpack_hook",
    "/venv/lib/python3.11/site-packages/torch/utils/checkpoint.py:903:check_recomputed_tensors_match",
)


def test_p01_checkpoint_error_is_its_own_kind_and_suggests_use_reentrant():
    tb = training_traceback(*BACKWARD_FRAMES, exc="torch.utils.checkpoint.CheckpointError: " + P01_MESSAGE)
    f = classify("CheckpointError", P01_MESSAGE, tb)
    assert (f.status, f.error_kind, f.phase) == ("error", "checkpoint-recompute", "train")
    assert "use_reentrant" in f.reason


P07_MESSAGE = (
    "torch.utils.checkpoint: Recomputed values for the following tensors have different metadata than during the "
    "forward pass.\ntensor at position 4:\nsaved metadata: {'shape': torch.Size([1024]), 'dtype': torch.bfloat16, "
    "'device': device(type='cuda', index=1)}\nrecomputed metadata: {'shape': torch.Size([0]), 'dtype': "
    "torch.bfloat16, 'device': device(type='cuda', index=1)}\n"
)
P07_TB = training_traceback(
    "/venv/lib/python3.11/site-packages/transformers/trainer.py:1870:training_step",
    "/venv/lib/python3.11/site-packages/accelerate/accelerator.py:2230:backward",
    "/venv/lib/python3.11/site-packages/deepspeed/runtime/engine.py:2215:backward",
    "/venv/lib/python3.11/site-packages/torch/utils/checkpoint.py:903:check_recomputed_tensors_match",
    exc="torch.utils.checkpoint.CheckpointError: " + P07_MESSAGE,
)
P07_SPEC = {
    "zero": 3,
    "gc": True,
    "fsdp": "none",
    "use_reentrant": False,
    "precision": "bf16",
    "frozen_params": True,
}


def test_p07_zero3_recompute_of_an_empty_tensor_is_incompatible_with_versions_attached():
    versions = {"deepspeed": "0.19.2", "torch": "2.11.0", "transformers": "5.13.0"}
    f = classify("CheckpointError", P07_MESSAGE, P07_TB, spec=P07_SPEC, versions=versions)
    assert (f.status, f.error_kind, f.phase) == ("error", "incompatible", "train")
    assert f.details["versions"] == versions
    assert f.details["known_incompatible"] == "huggingface/transformers#47254"
    assert "0.19.2" in f.reason and "use_reentrant=true" in f.reason


def test_p07_without_a_spec_is_detected_from_the_deepspeed_traceback():
    assert classify("CheckpointError", P07_MESSAGE, P07_TB).error_kind == "incompatible"
    size_msg = "The size of tensor a (0) must match the size of tensor b (1024) at non-singleton dimension 0"
    assert classify("RuntimeError", size_msg, P07_TB).error_kind == "incompatible"
    # The same empty recompute without any ZeRO-3 evidence stays a checkpoint-recompute error.
    assert classify("CheckpointError", P07_MESSAGE, "").error_kind == "checkpoint-recompute"
    assert classify("CheckpointError", P07_MESSAGE, P07_TB, spec={**P07_SPEC, "zero": 2}).error_kind == (
        "checkpoint-recompute"
    )


def test_p03_fp16_weights_with_fp16_amp_is_a_config_error():
    tb = training_traceback(
        "/venv/lib/python3.11/site-packages/accelerate/accelerator.py:2380:clip_grad_norm_",
        "/venv/lib/python3.11/site-packages/accelerate/accelerator.py:2330:unscale_gradients",
        "/venv/lib/python3.11/site-packages/torch/amp/grad_scaler.py:335:unscale_",
        "/venv/lib/python3.11/site-packages/torch/amp/grad_scaler.py:257:_unscale_grads_",
        exc="ValueError: Attempting to unscale FP16 gradients.",
    )
    f = classify("ValueError", "Attempting to unscale FP16 gradients.", tb)
    assert (f.status, f.error_kind, f.phase) == ("error", "config", "train")
    assert "fp16 weights + fp16 AMP" in f.reason


def test_trainer_setup_value_errors_are_config_errors_in_setup():
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/job/sweeper/job.py", line 60, in build_args\n    args = TrainingArguments(**kwargs)\n'
        '  File "<string>", line 135, in __init__\n'
        '  File "/venv/lib/python3.11/site-packages/transformers/training_args.py", line 1650, in __post_init__\n'
        "    raise ValueError(\n"
        "ValueError: --load_best_model_at_end requires the save and eval strategy to match\n"
    )
    f = classify("ValueError", "--load_best_model_at_end requires the save and eval strategy to match", tb)
    assert (f.error_kind, f.phase) == ("config", "setup")
    renamed = classify(
        "TypeError", "TrainingArguments.__init__() got an unexpected keyword argument 'evaluation_strategy'"
    )
    assert renamed.error_kind == "config"
    # A ValueError from the user's own code in a training step is not a configuration error.
    step = training_traceback("/job/model.py:10:compute_loss", exc="ValueError: bad labels")
    assert classify("ValueError", "bad labels", step).error_kind == "runtime"


def test_gloo_and_nccl_failures_are_collective():
    gloo = "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:41263"
    f = classify(
        "RuntimeError",
        gloo,
        training_traceback("/venv/torch/distributed/distributed_c10d.py:2050:all_reduce"),
    )
    assert (f.error_kind, f.status) == ("collective", "error") and "gloo" in f.reason
    nccl = (
        "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, "
        "NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for 600043 milliseconds before timing out."
    )
    f = classify("DistBackendError", nccl)
    assert f.error_kind == "collective" and "NCCL collective timed out" in f.reason
    assert classify("torch.distributed.DistBackendError", "NCCL error in: ProcessGroupNCCL.cpp:1970").error_kind == (
        "collective"
    )


def test_a_taken_rendezvous_port_is_internal_not_collective_in_torchs_own_words():
    import datetime
    import socket

    import torch.distributed as dist

    with socket.socket() as held:  # the port really taken, torch's TCPStore server really refused it
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(dist.DistNetworkError) as raised:
            dist.TCPStore("127.0.0.1", port, 1, True, timeout=datetime.timedelta(seconds=5))
    f = classify(type(raised.value).__name__, str(raised.value))
    assert (f.status, f.error_kind) == ("error", "internal")
    assert f"rendezvous could not listen on port {port}" in f.reason and "EADDRINUSE" in f.reason
    assert "not your configuration" in f.reason and "MASTER_PORT" in f.reason
    older = "The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use)."  # torch < 2.4
    assert "port 29500" in classify("DistNetworkError", older).reason
    # any other c10d store error stays a collective one (usually another rank's failure)
    assert classify(
        "DistStoreError", "Timed out after 901 seconds waiting for clients. 1/2 clients joined."
    ).error_kind == ("collective")


def test_import_errors_happen_in_setup():
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/job/sweeper/job.py", line 3, in <module>\n    import deepspeed\n'
        "ModuleNotFoundError: No module named 'deepspeed'\n"
    )
    f = classify("ModuleNotFoundError", "No module named 'deepspeed'", tb)
    assert (f.error_kind, f.phase) == ("import", "setup") and "'deepspeed'" in f.reason
    assert classify("ImportError", "cannot import name 'FSDPModule' from 'torch.distributed.fsdp'").error_kind == (
        "import"
    )


@pytest.mark.parametrize(
    "exc_type, signal",
    [("Signal 9", "SIGKILL"), ("SIGKILL", "SIGKILL"), ("SIGSEGV", "SIGSEGV"), ("signal 11", "SIGSEGV")],
)
def test_signals_are_crashes(exc_type, signal):
    f = classify(exc_type, "")
    assert (f.status, f.error_kind, f.details["signal"]) == ("error", "crash", signal)
    assert signal in f.reason


def test_crash_named_in_a_child_failure_message_and_plain_runtime_errors():
    child = "worker failed:\n  exitcode  : -11 (pid: 4242)\n  error_file: <N/A>\n  traceback : Signal 11 (SIGSEGV) received by PID 4242"
    assert classify("ChildFailedError", child).error_kind == "crash"
    f = classify("RuntimeError", "Expected all tensors to be on the same device, but found cuda:0 and cpu!")
    assert (f.status, f.error_kind) == ("error", "runtime") and "same device" in f.reason
    assert classify("SignificantError", "boom").error_kind == "runtime"  # not a signal


def test_every_kind_is_documented_and_phase_is_validated():
    assert set(ERROR_KINDS) >= {
        "checkpoint-recompute",
        "config",
        "incompatible",
        "collective",
        "import",
        "crash",
        "runtime",
    }
    with pytest.raises(ValueError):
        classify("RuntimeError", "x", phase="warmup")


@pytest.mark.parametrize(
    "frames, phase",
    [
        (["/venv/transformers/trainer.py:400:__init__"], "setup"),
        (["/venv/transformers/models/llama/modeling_llama.py:300:__init__"], "setup"),
        (["/venv/transformers/modeling_utils.py:1200:from_config"], "setup"),
        (
            [
                "/venv/transformers/trainer.py:2200:_wrap_model",
                "/venv/torch/nn/parallel/distributed.py:800:__init__",
            ],
            "setup",
        ),
        (["/venv/transformers/integrations/deepspeed.py:400:deepspeed_init"], "setup"),
        (["/venv/transformers/trainer.py:1870:training_step"], "train"),
        (["/venv/transformers/trainer.py:3398:evaluation_loop"], "eval"),
        (["/venv/transformers/trainer.py:3500:prediction_step"], "eval"),
        (["/venv/torch/utils/data/dataloader.py:700:__next__"], "train"),
    ],
)
def test_phase_from_traceback(frames, phase):
    assert infer_phase(training_traceback(*frames)) == phase
    assert infer_phase("") == "train"


def test_traceback_tail_keeps_the_last_30_lines():
    tb = "\n".join(f"line {i}" for i in range(100))
    assert classify("RuntimeError", "x", tb).details["traceback_tail"].splitlines() == [
        f"line {i}" for i in range(70, 100)
    ]


# ------------------------------------------------------------------------------------------- known incompatible


def test_known_incompatible_hits_p07_for_an_affected_deepspeed():
    reason = known_incompatible(P07_SPEC, {"deepspeed": "0.19.2", "torch": "2.11.0"})
    assert reason is not None and "huggingface/transformers#47254" in reason and "0.19.2" in reason
    # The default use_reentrant (unset) is non-reentrant; string spec values from the command line count too.
    assert known_incompatible({**P07_SPEC, "use_reentrant": None}, {"DeepSpeed": "0.16.4"})
    assert known_incompatible({**P07_SPEC, "zero": "3", "gc": "true"}, {"deepspeed": "0.19.2+cu128"})


@pytest.mark.parametrize(
    "change, versions",
    [
        ({}, {"deepspeed": "0.19.3"}),  # fixed by deepspeedai/DeepSpeed#8148
        ({}, {"deepspeed": "0.19.8"}),
        ({}, {}),  # version unknown: nothing claimed
        ({}, {"deepspeed": "not-a-version"}),
        ({"use_reentrant": True}, {"deepspeed": "0.19.2"}),
        ({"zero": 2}, {"deepspeed": "0.19.2"}),
        ({"gc": False}, {"deepspeed": "0.19.2"}),
    ],
)
def test_known_incompatible_misses(change, versions):
    assert known_incompatible({**P07_SPEC, **change}, versions) is None


def test_the_p07_row_names_a_seen_failure_but_never_refuses_before_launch():
    """Frozen parameters are not a spec key: the gate cannot see them, so only the classifier uses the row."""
    from sweeper.failures import match_known_incompatible

    versions = {"deepspeed": "0.19.2"}
    assert match_known_incompatible(P07_SPEC, versions).source == "huggingface/transformers#47254"
    assert match_known_incompatible(P07_SPEC, versions, before_launch=True) is None


def _point(**kw):
    from omegaconf import OmegaConf

    from sweeper.config.schema import schema_node
    from sweeper.config.spec import from_config

    return from_config(OmegaConf.merge(schema_node(), kw)).to_dict()


T03 = dict(gc=True, use_reentrant=True, training_args={"ddp_find_unused_parameters": True})


def test_t03_ddp_reentrant_find_unused_matches_a_real_spec_with_dotted_training_args_keys():
    from sweeper.failures import match_known_incompatible

    row = match_known_incompatible(_point(**T03), {"torch": "2.13.0+cpu"}, before_launch=True)
    assert row is not None and "mark a variable ready only once" in row.description
    assert {"use_reentrant", "training_args.ddp_find_unused_parameters", "gc"} <= set(row.named_keys())
    assert "#" in row.source and "use_reentrant=false" in row.workaround


@pytest.mark.parametrize(
    "change",
    [
        dict(use_reentrant=False),
        dict(gc=False),
        dict(ranks_per_node=1),  # one rank: no DDP wrapper
        dict(fsdp="full_shard"),
        dict(zero=2),
        dict(training_args={"ddp_find_unused_parameters": False}),
        dict(training_args={"ddp_find_unused_parameters": True, "ddp_static_graph": True}),  # the DDP docs' escape
    ],
)
def test_t03_row_misses_what_ddp_supports(change):
    assert known_incompatible(_point(**{**T03, **change}), {"torch": "2.13.0"}) is None


def test_the_table_rows_are_well_formed():
    from packaging.specifiers import SpecifierSet

    from sweeper.config.spec import PointSpec
    from sweeper.failures.incompatible import DERIVED

    fields = set(PointSpec.__dataclass_fields__)
    passthrough = ("training_args.", "fsdp_config.", "deepspeed_config.")
    for row in KNOWN_INCOMPATIBLE:
        SpecifierSet(row.affected)
        assert row.description and row.library and "#" in row.source and row.workaround
        for key in row.condition:
            assert key in fields or key in DERIVED or key.startswith(passthrough), key
        for key in row.named_keys():
            assert key in fields or key.startswith(passthrough), key
    assert any(row.before_launch for row in KNOWN_INCOMPATIBLE)  # at least one row the gate can refuse on


@pytest.mark.parametrize(
    "message",
    [
        "NCCL error in: ProcessGroupNCCL.cpp:1970, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version "
        "2.21.5 ncclInvalidUsage: This usually reflects invalid usage of NCCL library. Last error: Duplicate GPU "
        "detected : rank 8 and rank 0 both on CUDA device 1a000",
        "CUDA error: invalid device ordinal\nCUDA kernel errors might be asynchronously reported",
    ],
)
def test_a_rank_to_gpu_mapping_error_is_config_not_a_collective_symptom(message):
    f = classify("torch.distributed.DistBackendError", message, phase="setup")
    assert (f.status, f.error_kind) == ("error", "config")
    assert "ranks_per_node" in f.reason and "cluster.gpus_per_node" in f.reason
