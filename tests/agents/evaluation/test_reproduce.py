"""`mara reproduce --full` retrains through library calls; no default writes into the package."""

from __future__ import annotations

import argparse
import inspect
from pathlib import Path

import pytest
import yaml

from mara_env.config import ConfigError
from tests.conftest import SMALL

ROOT = Path(__file__).parents[3]
PACKAGES = ("mara_env", "mara_agents", "flow_predictor", "mara_traces")


def _inside_a_package(path: str) -> bool:
    resolved = (ROOT / path).resolve()
    return any(resolved.is_relative_to(ROOT / p) for p in PACKAGES)


def _out_defaults(parser: argparse.ArgumentParser, where: str) -> list[tuple[str, str]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _out_defaults(sub, f"{where} {name}")
        elif "out" in action.dest and isinstance(action.default, str):
            found.append((f"{where} {action.option_strings[0]}", action.default))
    return found


def test_no_default_output_is_inside_the_package() -> None:
    from flow_predictor.train import TrainConfig
    from mara_agents.cli import COMMANDS, build_parser
    from mara_agents.reproduce import reproduce
    from mara_agents.training.train import train

    defaults = [("TrainConfig.out", TrainConfig().out)]
    for f in (reproduce, train):
        defaults += [(f"{f.__name__}(out=)", inspect.signature(f).parameters["out"].default)]
    for name in COMMANDS:
        defaults += _out_defaults(build_parser([name]), "mara")
    assert any(where.startswith("mara predictor train") for where, _ in defaults)
    inside = [(where, d) for where, d in defaults if _inside_a_package(d)]
    assert not inside, f"default outputs inside the installed package: {inside}"


def test_retrain_calls_the_library_from_any_directory(tmp_path, monkeypatch) -> None:
    """The recipe is cloned, trained with PPO from the clone and exported, then with a second
    PPO stage from that export, and the predictor trained, all under ``out``; a rerun
    reuses all, and a changed recipe or a retrained earlier stage is refused."""
    from flow_predictor.train import TrainConfig
    from mara_agents.policy.inference import load_policy
    from mara_agents.reproduce import retrain
    from mara_agents.training.records import RECORD

    recipe = tmp_path / "recipes" / "tiny.yaml"
    recipe.parent.mkdir()
    recipe.write_text(
        yaml.safe_dump(
            {
                "name": "tiny",
                "env": {k: v for k, v in SMALL.items() if v is not None},
                "model": {"hidden": 16, "heads": 2, "critic_hidden": 16},
                "pretrain": {"scheduler": "uniform", "episodes": 1, "epochs": 1},
                "stop": {"training_iteration": 1},
                "rllib": {
                    "env_runners": {"num_env_runners": 0, "num_envs_per_env_runner": 1},
                    "training": {"train_batch_size_per_learner": 64, "minibatch_size": 32},
                },
            }
        )
    )
    more = recipe.with_name("tiny_more.yaml")  # the second stage, from the first's export
    more.write_text("base: tiny.yaml\nname: tiny_more\nseed: 1\n")
    stages = [recipe, more]
    # the last stage: DAgger rounds from the second's export (its init_weights replaced)
    rounds = recipe.with_name("tiny_rounds.yaml")
    rounds.write_text(
        "base: tiny.yaml\nname: tiny_rounds\npretrain: !replace\n  scheduler: uniform\n"
        "  init_weights: not_yet.pt\n  dagger_rounds: 1\n  dagger_episodes: 1\n"
        "  dagger_epochs: 1\n"
    )
    # a second DAgger stage from the first's export, its labels made consistent
    labels = recipe.with_name("tiny_labels.yaml")
    labels.write_text(
        "base: tiny_rounds.yaml\nname: tiny_labels\npretrain:\n  dagger_labels: consistent\n"
    )
    rounds = [rounds, labels]
    predictor = TrainConfig(
        epochs=1, prefixes_per_trace=2, hidden=16, depth=1, cond_hidden=8, val_samples=2
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    out = tmp_path / "results"
    finished = retrain(out, recipe, predictor, ppo_recipe=stages, dagger_recipes=rounds)
    assert finished == out / "retrained" / "tiny_labels.pt"
    assert "tiny_labels_pretrain.pt (warm start)" in load_policy(finished).meta["source"]
    assert (out / "retrained" / "train" / "tiny_rounds_pretrain_dagger1.pt").is_file()
    record = yaml.safe_load((out / "retrained" / "train" / "tiny_labels_pretrain.yaml").read_text())
    assert record["pretrain"]["init_weights"] == str(out / "retrained" / "tiny_rounds.pt")
    policy = out / "retrained" / "tiny_more.pt"
    assert retrain(out, recipe, predictor, stages, rounds) == finished  # all reused
    policy.unlink()  # the PPO stage retrains: the rounds no longer follow from it
    with pytest.raises(ConfigError, match=r"tiny_rounds_pretrain.pt was trained from other"):
        retrain(out, recipe, predictor, ppo_recipe=stages, dagger_recipes=rounds)
    assert policy.is_file() and finished.is_file()
    assert retrain(out, recipe, predictor, stages, dagger_recipes=()) == policy
    first = out / "retrained" / "tiny.pt"
    record = yaml.safe_load((out / "retrained" / "train" / "tiny_more" / RECORD).read_text())
    assert record["pretrain"]["init_weights"] == str(first)  # stage 2 starts from stage 1
    assert load_policy(policy).meta["env"]["num_nodes"] == SMALL["num_nodes"]
    assert (out / "retrained" / "flow.pt").is_file()
    assert (out / "retrained" / "train" / "tiny_pretrain_bc.pt").is_file()
    assert "checkpoint_" in load_policy(policy).meta["source"]  # the PPO stage's export
    assert not any(elsewhere.iterdir())  # nothing written relative to the cwd
    assert retrain(out, recipe, predictor, stages, dagger_recipes=()) == policy
    first.unlink()  # stage 1 retrains, so stage 2's export no longer follows from it
    with pytest.raises(ConfigError, match=r"tiny_more.pt was trained from other weights"):
        retrain(out, recipe, predictor, ppo_recipe=stages, dagger_recipes=())
    assert first.is_file() and policy.is_file()  # nothing lost
    more.write_text(more.read_text().replace("seed: 1", "seed: 2"))
    with pytest.raises(ConfigError, match=r"seed: 1 -> 2"):
        retrain(out, recipe, predictor, stages, dagger_recipes=())  # stale stage 2
    recipe.write_text(recipe.read_text().replace("epochs: 1", "epochs: 2"))
    with pytest.raises(ConfigError, match=r"pretrain.epochs: 1 -> 2"):
        retrain(out, recipe, predictor, ppo_recipe=None, dagger_recipes=())  # stale clone
    with pytest.raises(ConfigError, match="needs a source checkout"):
        retrain(out, recipe=tmp_path / "missing.yaml")


def test_the_main_job_writes_every_table_on_a_small_run(tmp_path) -> None:
    """`mara reproduce --all` end to end, small: the synthetic table paired against MARA with
    the bound's share of the room, the deadline-model table, the replayed job-trace table,
    the Gantt chart."""
    from mara_agents.reproduce import reproduce

    summary = reproduce(
        out=tmp_path / "results",
        episodes=2,
        loads=(1.0,),
        specs=("mara", "uniform", "lara", "bound"),
        workers=1,
        skip_predictor=True,
        jobs_episodes=1,
        deadline_models=True,
    )
    assert "### Paired difference vs mara" in summary
    assert "### Share of the room above uniform closed, towards bound" in summary
    assert "replayed days of the job trace 'philly' (test days, 16 nodes)" in summary
    # the deadline models side by side, first: mara and lara against uniform under each
    assert summary.index("## Deadline models side by side") < summary.index("## Task-completion")
    table = (tmp_path / "results" / "deadline_models.md").read_text()
    assert "| scheduler | padded, load 1 | unbiased, load 1 | blind, load 1 |" in table
    assert [line.split(" |")[0] for line in table.splitlines() if line.startswith("| ")][1:] == [
        "| mara",
        "| uniform",
        "| lara",
    ]
    out = tmp_path / "results"
    for name in (
        "schedulers/results.csv",
        "deadline_models/blind/results.csv",
        "deadline_models/unbiased/results.csv",
        "replayed/results.csv",
        "episode_gantt.png",
        "replayed/day_gantt.png",
    ):
        assert (out / name).is_file(), name
    assert (out / "summary.md").read_text() == summary
    assert_links_are_written(summary, out)


def assert_links_are_written(summary: str, out) -> None:
    """Every file the summary links is there (none the run skipped)."""
    import re

    linked = re.findall(r"`([\w/.]+\.(?:png|csv|md))`", summary)
    assert linked
    for name in linked:
        assert (out / name).is_file(), name


def test_the_headline_alone_leaves_the_deadline_models_out(tmp_path) -> None:
    """Plain `mara reproduce` (no --all): no deadline-model table, however many of its
    schedulers run."""
    from mara_agents.reproduce import reproduce

    summary = reproduce(
        out=tmp_path / "results",
        episodes=1,
        loads=(1.0,),
        specs=("uniform", "lara"),
        workers=1,
        skip_predictor=True,
        jobs=None,
    )
    assert "## Deadline models side by side" not in summary
    assert_links_are_written(summary, tmp_path / "results")
    assert not (tmp_path / "results" / "deadline_models.md").exists()
    assert not (tmp_path / "results" / "deadline_models").exists()
