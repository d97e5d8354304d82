"""``model=`` values resolved before Hydra (:mod:`sweeper.config.model_files`), without a process: a model file's
name stays, a config.json path / folder / cached hub id is found, anything else is refused with every way out."""

from __future__ import annotations

import json
from importlib.metadata import version

import pytest

from sweeper.config import model_files
from sweeper.config.model_files import ModelNotFound, find_config_json, resolve_model_arguments


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEEPER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf"))
    return tmp_path


def test_names_of_model_files_are_left_to_hydra(cache):
    argv = ["-m", "model=tiny,llama-2-7b", "fsdp=none"]
    assert resolve_model_arguments(argv) is argv


def test_a_file_a_folder_and_a_cached_hub_id_are_found(cache):
    folder = cache / "Mistral-7B-v0.1"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert find_config_json(str(folder)) == (folder / "config.json", "Mistral-7B-v0.1")
    assert find_config_json(str(folder / "config.json")) == (folder / "config.json", "Mistral-7B-v0.1")
    snapshot = cache / "hf" / "models--acme--m" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (cache / "hf" / "models--acme--m" / "refs").mkdir()
    (cache / "hf" / "models--acme--m" / "refs" / "main").write_text("abc")
    path, name = find_config_json("acme/m")
    assert path.read_text() == "{}" and name == "acme--m"
    with pytest.raises(ModelNotFound, match=r"not in the local Hugging Face cache .*hf download acme/other"):
        find_config_json("acme/other")


def test_an_unknown_model_names_every_way_out(cache):
    with pytest.raises(ModelNotFound) as refused:
        resolve_model_arguments(["model=llama-9000"])
    text = str(refused.value)
    assert "tiny" in text and "llama-2-7b" in text and "config.json" in text and "hub id" in text


def test_a_made_model_file_is_reused_and_the_search_path_merged_with_the_users(cache):
    folder = cache / "mine"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    made = model_files.models_dir() / "model" / "mine.yaml"
    made.parent.mkdir(parents=True)
    digest = __import__("hashlib").sha256((folder / "config.json").read_bytes()).hexdigest()[:16]
    stamp = f"# sweeper model file of {(folder / 'config.json').resolve()} (sha256 {digest}, transformers {version('transformers')})"
    made.write_text(stamp + "\nname: mine\n")  # the helper is not run for a file made from this content
    out = resolve_model_arguments(["-m", f"model=tiny,{folder}", "hydra.searchpath=[file:///x]"])
    assert out[:2] == ["-m", "model=tiny,mine"]
    assert out[2] == f"hydra.searchpath=[file:///x,file://{model_files.models_dir()}]"
    assert resolve_model_arguments([f"model={folder}"])[-1] == f"hydra.searchpath=[file://{model_files.models_dir()}]"


def test_a_config_string_is_never_an_omegaconf_interpolation():
    from omegaconf import OmegaConf

    from sweeper.config.model_files import _literal

    text = json.dumps(_literal({"note": "${oc.env:HOME}", "n": [1, "${x}"]}))
    node = OmegaConf.create(f"config: {text}")
    assert OmegaConf.to_container(node, resolve=True)["config"] == {"note": "${oc.env:HOME}", "n": [1, "${x}"]}
