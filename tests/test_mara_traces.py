"""Trace collectors: real runs produce valid traces, collection resumes, splits hold out sources."""

from __future__ import annotations

import numpy as np
import pytest

from mara_env.traces import MIN_POINTS, SHIPPED_LIBRARY, read_traces
from mara_traces import collect as collect_mod
from mara_traces.collect import FAMILIES, collect, draw_configs
from mara_traces.common import source_name
from mara_traces.splits import SPLIT_RULES, split_of


@pytest.mark.parametrize("family", list(FAMILIES))
def test_collect_small_runs_give_valid_traces(tmp_path, family):
    out = tmp_path / "lib.parquet"
    table = collect(family, 2, out, seed=3, progress=False, budget=0.08)
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
    # Runs differing only in hyper-parameters share their group's split.
    groups: dict[tuple, set] = {}
    for family in FAMILIES:
        for _, cfg in draw_configs(family, 60, seed=0):
            key = (family, cfg.get("dataset"), cfg.get("env"), cfg.get("algo"))
            groups.setdefault(key, set()).add(split_of(source_name(cfg)))
    assert all(len(splits) == 1 for splits in groups.values())
    assert set().union(*groups.values()) == {"train", "val", "test"}


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
        assert len(mine) >= 200, family
        assert set(mine["split"]) == {"train", "val", "test"}, family
    assert (per_trace.groupby("source")["split"].nunique() == 1).all()
    assert (per_trace["split"] == per_trace["source"].map(split_of)).all()
    # Held-out groups: no dataset/env/algorithm of a val/test rule appears in train.
    assert np.all(per_trace.loc[per_trace["split"] == "train", "source"].map(split_of) == "train")
