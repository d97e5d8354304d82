"""``model=`` from where users keep their models (issue 36): a ``config.json`` path, its folder, a hub id in the local
Hugging Face cache; real commands, real transformers in the helper, real ranks for the sweep."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

from tests.conftest import run_sweeper
from tests.integration.test_plan_cli import run_plan

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"
#: A tiny Mistral-shaped config.json as a user would have it (saved by transformers: architectures, torch_dtype)
TINY_MISTRAL = {
    "architectures": ["MistralForCausalLM"],
    "model_type": "mistral",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 2048,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.44.0",
}
STEPS = ["warmup_steps=1", "timed_steps=3", "memory_steps=1", "profile_steps=0", "profile_trace=false", "wandb=off"]


def _env(tmp_path):
    return {"SWEEPER_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_CACHE": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}


def test_a_sweep_of_a_users_config_json_runs_every_point_named_by_its_folder(tmp_path):
    folder = tmp_path / "my-mistral"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_MISTRAL))
    run = run_sweeper(["-m", f"model={folder}", "fsdp=none,full_shard", *STEPS], tmp_path, env=_env(tmp_path))
    assert run.proc.returncode == 0, run.output[-3000:]
    records = run.records()
    assert len(records) == 2 and {r.status for r in records} == {"ok"}, [r.reason for r in records]
    for r in records:
        assert r.spec["model"] == "my-mistral" and r.spec["model_type"] == "mistral"
        assert r.spec["decoder_layer"] == "MistralDecoderLayer"  # from the class's _no_split_modules: FSDP wraps it
        assert "architectures" not in r.spec["model_config"]  # how it was saved is not the architecture
        # 2 layers of (q 64x64, k,v 64x32, o 64x64, MLP 3x64x128, 2 norms) + embed + head + final norm
        assert r.metrics["param_count"] == 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64) + 2 * 64000 + 64
    assert "model=my-mistral" in records[0].replay and "hydra.searchpath=" in records[0].replay


def test_public_mistral_and_mixtral_configs_plan_with_exact_counts_and_never_a_false_does_not_fit(tmp_path):
    """Mixtral's activations are not modelled: a row "does not fit" only when its model states alone exceed the
    device (on 8 H100 80GB, every row: a true "no"); on 16 the ZeRO-3 rows' 43.5 GiB of states leave the fit unknown,
    never a "no"."""
    env = _env(tmp_path)
    out = tmp_path / "mistral"
    args = ["cluster=h100-80gb", "seq_len=4096"]
    proc, _ = run_plan([f"model={EXAMPLES / 'Mistral-7B-v0.1'}", *args, f"hydra.run.dir={out}"], tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "7,241,732,096" in proc.stdout  # the published Mistral-7B-v0.1's parameter count
    df = pd.read_csv(out / "plan.csv")
    assert (df["model"] == "Mistral-7B-v0.1").all() and df["fits"].astype(bool).any()
    mixtral = f"model={EXAMPLES / 'Mixtral-8x7B-v0.1' / 'config.json'}"
    for nodes in (1, 2):
        out = tmp_path / f"mixtral-{nodes}"
        proc, _ = run_plan([mixtral, *args, f"nodes={nodes}", f"hydra.run.dir={out}"], tmp_path, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "model_type='mixtral'" in proc.stdout  # the reason
        answer = next(line for line in proc.stdout.splitlines() if line.startswith("Answer"))
        df = pd.read_csv(out / "plan.csv")
        no = df["fits"] == False  # noqa: E712 - a column of True / False / missing
        assert df.loc[no, "predicted_note"].str.contains("model states alone").all()  # every "no" has its floor
        if nodes == 1:
            assert no.all() and answer == "Answer: no configuration is predicted to fit"
        else:
            zero3 = df["engine"] == "ZeRO-3"
            assert zero3.any() and df.loc[zero3, "fits"].isna().all(), df[["engine", "fits"]]
            assert "of the 10 whose fit is known" in answer and "unknown fit" in proc.stdout


def test_a_hub_id_is_read_from_the_local_cache_and_one_not_there_is_refused_without_a_download(tmp_path):
    env = _env(tmp_path)
    snapshot = tmp_path / "hf" / "models--acme--tiny-mistral" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(TINY_MISTRAL))
    (tmp_path / "hf" / "models--acme--tiny-mistral" / "refs").mkdir()
    (tmp_path / "hf" / "models--acme--tiny-mistral" / "refs" / "main").write_text("0123abc")
    out = tmp_path / "plan"
    proc, _ = run_plan(
        ["model=acme/tiny-mistral", "cluster=local", "seq_len=128", f"hydra.run.dir={out}"], tmp_path, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (pd.read_csv(out / "plan.csv")["model"] == "acme--tiny-mistral").all()
    shutil.rmtree(out)
    proc, _ = run_plan(["model=acme/other", "cluster=local", "seq_len=128", f"hydra.run.dir={out}"], tmp_path, env=env)
    assert proc.returncode == 2 and "not in the local Hugging Face cache" in proc.stderr, proc.stderr[-2000:]
    assert str(tmp_path / "hf") in proc.stderr and "Traceback" not in proc.stderr and not out.exists()


def test_a_tiny_mixture_of_experts_sweeps_on_cpu_with_every_point_ok_and_its_states_exact(tmp_path):
    """Issue 36: a Mixtral-shaped MoE from its config.json under DDP, FSDP and ZeRO-2: every point ok, the planner's
    parameter, gradient and optimizer-state bytes per rank equal the measured ones (every expert counted); its peak
    and throughput are "unknown" with the reason, not guessed."""
    folder = tmp_path / "tiny-moe"
    folder.mkdir()
    moe = {k: v for k, v in TINY_MISTRAL.items() if k not in ("architectures", "sliding_window")}
    moe.update(model_type="mixtral", num_local_experts=4, num_experts_per_tok=2, intermediate_size=96)
    (folder / "config.json").write_text(json.dumps(moe))
    grid = ["-m", f"model={folder}", "fsdp=none,full_shard", "zero=0", *STEPS, f"hydra.sweep.dir={tmp_path / 's'}"]
    run = run_sweeper(grid, tmp_path, env=_env(tmp_path))
    assert run.proc.returncode == 0, run.output[-3000:]
    zero = run_sweeper([*grid[:2], "zero=2", *grid[4:]], tmp_path, env=_env(tmp_path))
    assert zero.proc.returncode == 0, zero.output[-3000:]
    records = zero.records()
    assert len(records) == 3 and {r.status for r in records} == {"ok"}, [r.reason for r in records]
    for r in records:
        for key in ("param_bytes_per_rank", "optimizer_state_bytes_per_rank", "grad_bytes_per_rank"):
            assert r.metrics.get(key) == r.predicted.get(key), (r.spec["fsdp"], r.spec["zero"], key)
        assert r.metrics["param_bytes_per_rank"] > 0 and "mixture of experts" in r.predicted["note"]
        assert r.predicted.get("peak_bytes") is None
    # the measured MFU counts the FLOPs a token does (top-k experts and the router), as the planner does: counting
    # every expert's matmuls would overstate it
    from sweeper.capacity.arch import Arch

    arch = Arch.from_config("mixtral", {k: v for k, v in moe.items() if k != "model_type"})
    assert records[0].metrics["flops_per_token"] == arch.flops_per_token(records[0].spec["seq_len"])
