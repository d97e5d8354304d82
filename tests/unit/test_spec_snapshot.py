"""PointSpec.to_dict: the fields walked once, a fresh copy per call, nothing of the snapshot in a pickle."""

from __future__ import annotations

import copy
import pickle
from dataclasses import asdict, replace

from tests.unit.specs import make_spec


def test_to_dict_equals_asdict_and_each_call_is_the_callers_own():
    spec = make_spec(fsdp="full_shard", training_args={"max_grad_norm": 0.5}, fsdp_config={"reshard_after_forward": 1})
    first = spec.to_dict()
    assert first == asdict(spec)
    first["training_args"]["max_grad_norm"] = 9.0  # a caller changes its copy (identity.normalised does)
    first["model_config"].clear()
    first["plan"]["efficiency"] = -1
    again = spec.to_dict()
    assert again == asdict(spec)
    assert again["training_args"] == {"max_grad_norm": 0.5}
    assert again["model_config"] and again["plan"] != first["plan"]
    assert spec.training_args == {"max_grad_norm": 0.5}  # the spec itself never changed


def test_the_snapshot_is_not_in_pickles_copies_equality_or_replace():
    spec = make_spec(seed=3)
    spec.to_dict()  # takes the snapshot
    assert "_memo" in vars(spec)
    back = pickle.loads(pickle.dumps(spec))
    assert back == spec and "_memo" not in vars(back)
    assert len(pickle.dumps(spec)) == len(pickle.dumps(make_spec(seed=3)))  # a SLURM payload as large as before
    assert "_memo" not in vars(copy.deepcopy(spec))
    other = replace(spec, seed=4)
    assert other.to_dict()["seed"] == 4 and spec.to_dict()["seed"] == 3
