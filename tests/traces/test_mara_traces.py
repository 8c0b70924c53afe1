"""Trace collectors: real runs produce valid traces, collection resumes, splits hold out sources."""

from __future__ import annotations

import gymnasium
import numpy as np
import pandas as pd
import pytest
import torch

from mara_env.traces import MIN_POINTS, SHIPPED_LIBRARY, read_traces
from mara_traces import collect as collect_mod
from mara_traces import lm, rl
from mara_traces.collect import FAMILIES, LIBRARY_RECIPE, collect, draw_configs, learning_traces
from mara_traces.common import WARMUP, lr_factor, source_name
from mara_traces.splits import SPLIT_RULES, split_of


@pytest.mark.parametrize(
    ("family", "stream"), [("tabular", "v1"), ("vision", "v2"), ("rl", "v2"), ("lm", "v1")]
)
def test_collect_small_runs_give_valid_traces(tmp_path, family, stream):
    out = tmp_path / "lib.parquet"
    table = collect(family, 2, out, seed=3, progress=False, budget=0.08, stream=stream)
    assert list(table.columns) == ["trace_id", "family", "source", "step", "loss", "split"]
    back = read_traces(out)  # validates
    assert back["trace_id"].nunique() == 2
    assert (back["family"] == family).all()
    assert (back.groupby("trace_id").size() >= MIN_POINTS).all()
    assert (back["loss"] >= 0).all()
    for _, trace in back.groupby("trace_id"):
        assert trace["source"].nunique() == 1
        assert trace["split"].iloc[0] == split_of(trace["source"].iloc[0])


def test_collect_resumes_and_skips_existing_ids(tmp_path, monkeypatch):
    out = tmp_path / "lib.parquet"
    calls = []
    real = collect_mod.run_config

    def counting(family, trace_id, cfg):
        calls.append(trace_id)
        return real(family, trace_id, cfg)

    monkeypatch.setattr(collect_mod, "run_config", counting)
    first = collect("tabular", 2, out, progress=False, budget=0.08)
    assert len(calls) == 2
    again = collect("tabular", 2, out, progress=False, budget=0.08)
    assert len(calls) == 2
    assert again.equals(first)
    more = collect("tabular", 3, out, progress=False, budget=0.08)
    assert len(calls) == 3
    assert more["trace_id"].nunique() == 3
    assert more.iloc[: len(first)].reset_index(drop=True).equals(first)


def test_configs_are_deterministic_and_extend():
    short = draw_configs("vision", 3, seed=5)
    assert draw_configs("vision", 3, seed=5) == short
    assert draw_configs("vision", 6, seed=5)[:3] == short
    assert draw_configs("vision", 3, seed=6) != short
    with pytest.raises(ValueError, match="unknown trace family"):
        draw_configs("audio", 1, seed=0)


def test_split_is_a_pure_function_of_the_source_group():
    for key, value, split in SPLIT_RULES:
        assert split_of(f"{key}={value};lr=0.1;seed=1") == split
        assert split_of(f"{key}={value};lr=0.003;seed=99") == split
    assert split_of("dataset=iris;model=linear;seed=1") == "train"
    assert split_of("env=CartPole-v1;algo=ppo;seed=1") == "train"
    # Runs differing only in hyper-parameters share their group's split, and every family
    # of the recipe has sources of its own in train, val and test.
    groups: dict[tuple, set] = {}
    for family, stream, _ in LIBRARY_RECIPE:
        for _, cfg in draw_configs(family, 80, seed=0, stream=stream):
            key = (family, cfg.get("dataset"), cfg.get("env"), cfg.get("corpus"))
            groups.setdefault(key, set()).add(split_of(source_name(cfg)))
    assert all(len(splits) == 1 for splits in groups.values())
    for family in FAMILIES:
        mine = [s for key, splits in groups.items() if key[0] == family for s in splits]
        assert set(mine) == {"train", "val", "test"}, family


def test_every_source_names_its_data_with_a_key():
    keys = {"tabular": "dataset", "vision": "dataset", "rl": "env", "lm": "corpus"}
    for family, stream, _ in LIBRARY_RECIPE:
        for _, cfg in draw_configs(family, 20, seed=0, stream=stream):
            assert source_name(cfg).startswith(f"{keys[family]}="), cfg


def test_the_recipe_has_eight_rl_environments_none_in_two_splits():
    envs: dict[str, set] = {}
    for family, stream, n in LIBRARY_RECIPE:
        if family == "rl":
            for _, cfg in draw_configs(family, n, seed=0, stream=stream):
                envs.setdefault(cfg["env"], set()).add(split_of(source_name(cfg)))
    assert len(envs) >= 8
    assert all(len(splits) == 1 for splits in envs.values())
    for split in ("val", "test"):
        assert sum(splits == {split} for splits in envs.values()) >= 2, split
    algos = {cfg["algo"] for _, cfg in draw_configs("rl", 150, seed=0, stream="v2")}
    assert algos == {"a2c", "ppo", "dqn"}


def test_learning_traces_leaves_out_runs_that_never_learn():
    table = pd.DataFrame(
        {
            "trace_id": ["a"] * 3 + ["b"] * 3,
            "loss": [1.0, 0.8, 0.5, 1.0, 1.0, 1.0],
        }
    )
    kept, dropped = learning_traces(table)
    assert dropped == ["b"] and set(kept["trace_id"]) == {"a"}


def test_shipped_library_meets_the_counts():
    assert SHIPPED_LIBRARY.stat().st_size <= 20 * 2**20
    lib = read_traces(SHIPPED_LIBRARY)
    per_trace = lib.groupby("trace_id").agg(
        family=("family", "first"),
        source=("source", "first"),
        split=("split", "first"),
        points=("step", "size"),
    )
    assert (per_trace["points"] >= 100).all()
    for family in FAMILIES:
        mine = per_trace[per_trace["family"] == family]
        assert len(mine) >= 300, family
        assert set(mine["split"]) == {"train", "val", "test"}, family
    rl_envs = per_trace.loc[per_trace["family"] == "rl", "source"].str.extract(r"env=([^;]+)")[0]
    assert rl_envs.nunique() >= 8
    assert (per_trace.groupby("source")["split"].nunique() == 1).all()
    assert (per_trace["split"] == per_trace["source"].map(split_of)).all()
    # Held-out groups: no dataset/env/algorithm of a val/test rule appears in train.
    assert np.all(per_trace.loc[per_trace["split"] == "train", "source"].map(split_of) == "train")


def test_the_recipe_still_draws_the_shipped_configs():
    # New streams must never change the draws behind the shipped traces.
    lib = read_traces(SHIPPED_LIBRARY)
    shipped = lib.groupby("trace_id")["source"].first()
    for family, stream, _ in LIBRARY_RECIPE:
        for tid, cfg in draw_configs(family, 30, seed=0, stream=stream):
            if tid in shipped.index:  # runs that never learned are left out
                assert shipped[tid] == source_name(cfg), tid
        assert draw_configs(family, 5, seed=0, stream="v1") == draw_configs(family, 5, seed=0)


def test_extension_stream_is_separate_and_train_only():
    ext = draw_configs("rl", 60, seed=0, stream="x1")
    assert [tid for tid, _ in ext[:2]] == ["rl-x1-s0-000000", "rl-x1-s0-000001"]
    assert draw_configs("rl", 5, seed=0, stream="x1") == ext[:5]
    assert {tid for tid, _ in ext}.isdisjoint(tid for tid, _ in draw_configs("rl", 60, seed=0))
    assert all(split_of(source_name(cfg)) == "train" for _, cfg in ext)
    assert {cfg["algo"] for _, cfg in ext} == {"a2c", "ppo"}
    assert {cfg["map"] for _, cfg in ext} >= {"4x4", "8x8"}
    assert any("mapseed" in cfg for _, cfg in ext) and {cfg["slip"] for _, cfg in ext} == {0, 1}
    with pytest.raises(ValueError, match="unknown config stream"):
        draw_configs("rl", 1, seed=0, stream="x9")
    with pytest.raises(ValueError, match="unknown config stream"):
        draw_configs("tabular", 1, seed=0, stream="x1")


@pytest.mark.parametrize(
    "variant",
    [{"map": "4x4", "slip": 0}, {"map": "8x8", "slip": 1}, {"map": "5x5", "mapseed": 7, "slip": 0}],
)
@pytest.mark.parametrize("algo", ["a2c", "ppo"])
def test_frozen_lake_runs_give_valid_traces(variant, algo):
    cfg = {"env": "FrozenLake-v1", **variant, "algo": algo, "model": "mlp-16x1", "opt": "adam"}
    cfg |= {"lr": 0.003, "envs": 8, "horizon": 8, "gamma": 0.99, "lam": 0.95, "ent": 0.01}
    cfg |= {"epochs": 2, "clip": 0.2} if algo == "ppo" else {}
    cfg |= {"points": 12, "every": 2, "seed": 1}
    steps, loss = rl.run(cfg)
    assert len(steps) == len(loss) == 12
    assert np.all(np.diff(steps) > 0)
    assert np.all((loss >= 0) & (loss <= 1))
    assert split_of(source_name(cfg)) == "train"


def test_discrete_observations_are_one_hot():
    dim, encode = rl.obs_encoder(gymnasium.spaces.Discrete(5))
    assert dim == 5
    np.testing.assert_array_equal(encode(np.array([0, 3])), np.eye(5, dtype=np.float32)[[0, 3]])
    dim, encode = rl.obs_encoder(gymnasium.spaces.Box(-1, 1, (4,)))
    obs = np.ones((2, 4), np.float32)
    assert dim == 4 and encode(obs) is obs


def test_extension_stream_appends_and_keeps_existing_rows(tmp_path):
    out = tmp_path / "lib.parquet"
    base = collect("rl", 2, out, seed=1, progress=False, budget=0.08)
    both = collect("rl", 2, out, seed=1, progress=False, budget=0.08, stream="x1")
    assert both.iloc[: len(base)].reset_index(drop=True).equals(base)
    new = both.iloc[len(base) :]
    assert set(new["trace_id"]) == {"rl-x1-s1-000000", "rl-x1-s1-000001"}
    assert (new["split"] == "train").all() and new["source"].str.contains("FrozenLake").all()
    assert new["loss"].between(0, 1).all()


def test_v2_schedules_warm_up_then_decay():
    frac = np.linspace(0.0, 0.999, 400)
    for name in ("warmup_cosine", "invsqrt"):
        f = np.array([lr_factor(name, x) for x in frac])
        peak = int(np.argmax(f))
        assert 0 < frac[peak] <= WARMUP + 0.01 and f[0] < 0.1 and f[-1] < 0.5 * f[peak], name
        assert np.all(np.diff(f[:peak]) > 0) and np.all(np.diff(f[peak + 1 :]) <= 0), name
    steps = np.array([lr_factor("step", x) for x in frac])
    assert sorted(set(steps.round(6))) == [0.01, 0.1, 1.0]


def test_lm_runs_log_held_out_cross_entropy():
    cfg = {"corpus": "code-xml", "model": "transformer-16x1h2", "ctx": 16, "opt": "adamw"}
    cfg |= {"lr": 0.003, "sched": "invsqrt", "bs": 4, "points": 12, "every": 2, "seed": 1}
    steps, loss = lm.run(cfg)
    np.testing.assert_array_equal(steps, np.arange(2, 25, 2))
    # Near log(256) nats per byte at the start, lower after training.
    assert 4.0 < loss[0] < 6.5 and loss[-1] < loss[0]
    assert split_of(source_name(cfg)) == "val"
    lstm = lm.run(cfg | {"model": "lstm-16x1"})[1]
    assert len(lstm) == 12 and np.isfinite(lstm).all()


def test_lm_corpora_are_disjoint_and_deterministic():
    sizes = {name: len(lm.corpus_bytes(name)) for name in lm.CORPORA}
    assert min(sizes.values()) > 20_000
    packages = [p for _, pkgs in lm.CORPORA.values() for p in pkgs]
    assert len(packages) == len(set(packages))  # no stdlib package in two corpora
    with pytest.raises(ValueError, match="unknown corpus"):
        lm.corpus_bytes("shakespeare")


def test_step_decay_drops_show_in_the_curve():
    from mara_traces import tabular

    cfg = {"dataset": "regression", "n": 1000, "noise": 0.3, "dseed": 1, "model": "mlp-32x1"}
    cfg |= {"act": "relu", "opt": "adam", "lr": 0.03, "sched": "step", "bs": 16}
    cfg |= {"points": 60, "every": 5, "seed": 0}
    _, loss = tabular.run(cfg)
    # The learning rate falls 10x at 1/3 and 2/3 of the run; the loss's noise floor with it.
    for k in (20, 40):
        assert loss[k + 1 : k + 6].mean() < 0.95 * loss[k - 5 : k].mean(), k


def test_vision_augmentation_is_seeded():
    from mara_traces.vision import augment_batch

    x = torch.arange(2 * 16 * 16, dtype=torch.float32).reshape(2, 1, 16, 16)
    shift = augment_batch("shift+flip")
    a = shift(x, torch.Generator().manual_seed(0))
    b = shift(x, torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.shape == x.shape
    assert augment_batch("none") is None
