"""Evaluation harness (registry, runner, stats, report): common random numbers, determinism,
outputs, specs and the CLI."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mara_agents.cli import main
from mara_agents.evaluation.registry import SpecError, make_scheduler, register_agent_factory
from mara_agents.evaluation.runner import episode_seed, evaluate
from mara_agents.evaluation.stats import COLUMNS, family_paired_differences, family_rates
from mara_env.cluster import ClusterSim
from mara_env.config import ClusterConfig
from mara_env.traces import load_traces


@pytest.fixture
def config(small_config) -> ClusterConfig:
    return ClusterConfig.from_dict({**small_config, "num_nodes": 6, "num_slots": 16})


def test_results_columns_and_outputs(config, tmp_path) -> None:
    df = evaluate(["lara", "edf"], [1.0, 2.0], 3, [0], config, workers=1, out_dir=tmp_path)
    out = pd.read_csv(tmp_path / "results.csv")
    assert list(out.columns[:5]) == ["scheduler", "load", "episode", "seed", "completion_rate"]
    families = sorted(set(load_traces(config.traces, split=config.split).families.tolist()))
    per_family = [f"{k}_{f}" for f in families for k in ("tasks", "completed")]
    assert list(out.columns) == [*COLUMNS, *per_family]
    assert len(out) == len(df) == 2 * 2 * 3
    # the per-family counts add up to the totals
    for k in ("tasks", "completed"):
        np.testing.assert_array_equal(out[[f"{k}_{f}" for f in families]].sum(axis=1), out[k])
    assert out["tasks"].sum() > 0
    for name in ("summary.md", "completion_vs_load.png", "paired_differences.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert any((tmp_path / "tb").iterdir())
    summary = (tmp_path / "summary.md").read_text()
    assert "Paired difference vs lara" in summary
    if len(families) > 1:
        rates = family_rates(df).set_index(["scheduler", "load", "family"])
        g = out[(out.scheduler == "edf") & (out.load == 2.0)]
        f = families[0]
        expect = g[f"completed_{f}"].sum() / g[f"tasks_{f}"].sum()
        assert rates.at[("edf", 2.0, f), "rate"] == pytest.approx(expect)
        assert "Completion rate by trace family" in summary
        assert "Paired difference by trace family vs lara" in summary
        diffs = family_paired_differences(df, "lara").set_index(["scheduler", "load", "family"])
        lara_rate = rates.at[("lara", 2.0, f), "rate"]
        d = diffs.loc[("edf", 2.0, f)]
        assert d["diff"] == pytest.approx(expect - lara_rate)
        assert np.isfinite(d["ci95"]) and d["ci95"] >= 0
        assert (tmp_path / "completion_by_family.png").stat().st_size > 0


def test_every_scheduler_sees_the_same_episodes(config) -> None:
    df = evaluate(["uniform", "random"], [1.5], 4, [0, 7], config, workers=1, progress=False)
    seeds = df.pivot_table(index="episode", columns="scheduler", values="seed")
    assert (seeds["uniform"] == seeds["random"]).all()
    tasks = df.pivot_table(index="episode", columns="scheduler", values="tasks")
    assert (tasks["uniform"] == tasks["random"]).all()
    assert episode_seed(0, 1.5, 2) == episode_seed(0, 1.5, 2) != episode_seed(1, 1.5, 2)


@pytest.mark.parametrize("specs", [["lara", "random"], ["mara", "flow_share", "env=edf"]])
def test_results_do_not_depend_on_worker_count(config, tmp_path, specs) -> None:
    """Agents are built once per worker job and reset per episode: chunking the episodes
    differently between workers must not change a byte."""
    args = (specs, [1.0, 1.5], 3, [0], config)
    evaluate(*args, workers=1, out_dir=tmp_path / "w1", progress=False)
    evaluate(*args, workers=2, out_dir=tmp_path / "w2", progress=False)
    assert (tmp_path / "w1/results.csv").read_bytes() == (tmp_path / "w2/results.csv").read_bytes()


def test_env_driven_agent_matches_fast_path(config) -> None:
    # With as many slots as tasks can be active, driving EDF through the env is exact.
    df = evaluate(["edf", "env=edf"], [1.0], 2, [0], config, workers=1, progress=False)
    a, b = (df[df.scheduler == s].drop(columns="scheduler") for s in ("edf", "env=edf"))
    assert np.array_equal(a.to_numpy(), b.to_numpy())


class IdleAgent:
    def slots_for(self, num_nodes: int) -> int | None:
        return None

    def reset(self, env, seed: int) -> None:
        pass

    def act_round(self, env) -> np.ndarray:
        config = env.unwrapped.config
        return np.full(config.num_nodes, config.num_slots)


def test_registered_agent_factory_is_used(config) -> None:
    register_agent_factory("idle", lambda arg: IdleAgent())
    df = evaluate(["idle=x"], [1.0], 1, [0], config, workers=1, progress=False)
    assert df["completion_rate"].iloc[0] == 0.0
    assert df["scheduler"].iloc[0] == "idle=x"


class SlotCountingAgent(IdleAgent):
    """Idles, and records the slot count of the env the harness built for it."""

    seen: set[int] = set()

    def slots_for(self, num_nodes: int) -> int | None:
        return 2

    def act_round(self, env) -> np.ndarray:
        SlotCountingAgent.seen.add(env.unwrapped.config.num_slots)
        return super().act_round(env)


def test_agent_gets_an_env_with_its_own_slot_count(config) -> None:
    """A policy trained on K slots runs with K slots, whatever the harness config says,
    on the same workloads (tasks per episode) as everyone else."""
    register_agent_factory("slots2", lambda arg: SlotCountingAgent())
    df = evaluate(["slots2=x", "edf"], [1.0], 2, [0], config, workers=1, progress=False)
    assert SlotCountingAgent.seen == {2} and config.num_slots == 16
    tasks = df.pivot_table(index="episode", columns="scheduler", values="tasks")
    assert (tasks["slots2=x"] == tasks["edf"]).all()


def test_scheduler_parameters_in_spec() -> None:
    s = make_scheduler("lara:margin=0.3:explore_reports=4")
    assert s.work.margin == 0.3 and s.explore_reports == 4
    flow = make_scheduler("lara:predictor=flow")
    assert flow.work.predictor == "flow" and flow.explore_reports == 3
    with pytest.raises(SpecError, match="unknown scheduler 'nope'.*lara"):
        make_scheduler("nope")
    with pytest.raises(SpecError, match="bogus"):
        make_scheduler("lara:bogus=1")


@pytest.mark.parametrize("command", ["evaluate", "simulate"])
def test_cli_rejects_unknown_scheduler(command, tmp_path, capsys) -> None:
    flag = "--schedulers" if command == "evaluate" else "--scheduler"
    argv = [command, flag, "lara,nope" if command == "evaluate" else "nope", "--episodes", "1"]
    if command == "evaluate":
        argv += ["--out", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "unknown scheduler 'nope'" in err and "lara" in err and "oracle" in err


EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_own_scheduler_by_import_path(config, monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    specs = ["my_scheduler.LeastAttained", "my_scheduler.LeastAttained:most=1", "uniform"]
    df = evaluate(specs, [1.5], 3, [0], config, workers=1, progress=False)
    assert list(dict.fromkeys(df["scheduler"])) == specs
    # most=1 really reaches the class: no task ever gets a second node
    sched = make_scheduler("my_scheduler.LeastAttained:most=1")
    sim = ClusterSim(config.replace(load=1.5), load_traces(config.traces, split=config.split))
    sim.reset(np.random.default_rng(0))
    sched.reset(sim, np.random.default_rng(1))
    while not sim.done:
        counts = sched.allocate(sim)
        assert counts.max(initial=0) <= 1
        sim.tick(sched.assign(sim))
    argv = ["evaluate", "--schedulers", "my_scheduler.LeastAttained:most=2,lara"]
    argv += ["--loads", "1.0", "--episodes", "2", "--workers", "1", "--out", str(tmp_path)]
    assert main([*argv, "--no-progress"]) == 0
    assert "my_scheduler.LeastAttained:most=2" in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module.Sched", "cannot import module 'no_such_module'"),
        ("my_scheduler.Missing", "module 'my_scheduler' has no 'Missing'"),
        ("my_scheduler.np", "not a subclass of mara_env.schedulers.Scheduler"),
        ("my_scheduler.LeastAttained:most=0", "expected at least 1 node per task"),
    ],
)
def test_own_scheduler_errors_name_the_culprit(monkeypatch, spec, message) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    with pytest.raises(SpecError, match=message):
        make_scheduler(spec)


class CountingAgent(IdleAgent):
    """Idles and counts the episodes it was reset for."""

    resets = 0

    def reset(self, env, seed: int) -> None:
        CountingAgent.resets += 1


def test_bad_policy_spec_fails_before_any_episode(config, tmp_path, capsys) -> None:
    register_agent_factory("count", lambda arg: CountingAgent())
    (tmp_path / "empty.pt").write_bytes(b"")
    cases = {
        "mara=/missing.pt": "mara=/missing.pt: policy file '/missing.pt' does not exist",
        f"mara={tmp_path / 'empty.pt'}": "empty.pt: policy file is empty",
        "env=nope": "unknown scheduler 'nope'",
    }
    for spec, message in cases.items():
        with pytest.raises(SpecError, match=message):
            specs = ["count=x", "lara", spec]
            evaluate(
                specs, [1.0], 2, [0], config, workers=1, progress=False, out_dir=tmp_path / "o"
            )
    assert CountingAgent.resets == 0 and not (tmp_path / "o").exists()
    argv = ["evaluate", "--schedulers", "lara,mara=/missing.pt", "--episodes", "1"]
    assert main([*argv, "--no-progress", "--out", str(tmp_path / "cli")]) == 2
    assert "policy file '/missing.pt' does not exist" in capsys.readouterr().err
    assert not (tmp_path / "cli" / "results.csv").exists()


def _node_by_node(agent, config, traces, seed: int) -> dict:
    """An episode of ``agent``'s ``act`` stepping the AEC env node by node; its metrics."""
    from mara_env.cluster_env import raw_env

    slots = agent.slots_for(config.num_nodes) or config.num_slots
    env = raw_env(config=replace(config, num_slots=slots), trace_set=traces)
    env.engine.sim.record = True
    env.reset(seed=seed)
    agent.reset(env, seed)
    for name in env.agent_iter():
        _, _, term, trunc, _ = env.last(observe=False)
        env.step(None if term or trunc else agent.act(env, name))
    return {**env.engine.sim.metrics(), "allocation": np.array(env.engine.sim.assign_log)}


@pytest.mark.parametrize("spec", ["mara", "env=lara", "env=flow_share"])
def test_acting_round_by_round_matches_the_aec_loop(config, spec) -> None:
    """The harness drives an agent round by round; the episode is the one the AEC loop
    gives with the agent's node-by-node ``act``."""
    from mara_agents.evaluation.registry import expand_alias
    from mara_agents.evaluation.runner import build, run_agent_episode

    traces = load_traces(config.traces, split=config.split)
    agent = build(expand_alias(spec))
    for episode in range(2):
        seed = episode_seed(0, 1.5, episode)
        by_round = run_agent_episode(agent, config, traces, seed, record=True)
        by_node = _node_by_node(agent, config, traces, seed)
        assert np.array_equal(by_round.pop("allocation"), by_node.pop("allocation"))
        assert by_round == by_node


def test_the_policy_file_is_read_once_per_process(config, monkeypatch) -> None:
    """The policy file is read once per process: the up-front check, the size note and
    the worker's agent (in this process: workers=1) share one read, and every episode
    the one agent."""
    from mara_agents.policy import policy_file

    policy_file._read.cache_clear()
    reads = []
    real = policy_file.torch.load

    def load(path, *args, **kwargs):  # torch.load reads the flow checkpoint too
        reads.append(Path(path) == policy_file.SHIPPED_POLICY)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(policy_file.torch, "load", load)
    evaluate(["mara"], [1.0], 4, [0], config, workers=1, progress=False)
    assert sum(reads) == 1


def test_bound_is_a_reference_spec_above_every_scheduler(config, tmp_path) -> None:
    """``bound`` runs beside schedulers on the same episodes, is never below what they
    complete, gets a one-line error for a bad parameter, and its rows are the same for 1
    and 2 workers (no timing in them)."""
    specs = ["bound", "edf", "oracle", "env=lara"]
    args = (specs, [1.0, 2.0], 3, [0], config)
    df = evaluate(*args, workers=1, out_dir=tmp_path / "w1", progress=False)
    evaluate(*args, workers=2, out_dir=tmp_path / "w2", progress=False)
    assert (tmp_path / "w1/results.csv").read_bytes() == (tmp_path / "w2/results.csv").read_bytes()
    rates = df.pivot_table(index=["load", "episode"], columns="scheduler", values="completed")
    for spec in specs[1:]:
        assert (rates["bound"] >= rates[spec]).all(), spec
    summary = (tmp_path / "w1/summary.md").read_text()
    assert "## Share of the room above uniform" not in summary  # uniform was not evaluated
    with pytest.raises(SpecError, match="node_limit='many'; expected int"):
        evaluate(["bound:node_limit=many"], [1.0], 1, [0], config, workers=1, progress=False)
    with pytest.raises(SpecError, match="unknown parameter 'nodes'"):
        evaluate(["bound:nodes=3"], [1.0], 1, [0], config, workers=1, progress=False)


def test_gap_shares_against_the_bound_and_the_oracle() -> None:
    """(S - uniform) / (ceiling - uniform) per load, from pooled means."""
    from mara_agents.evaluation.stats import gap_shares

    rows = [
        {"scheduler": s, "load": 1.0, "episode": e, "completion_rate": v}
        for s, vals in {
            "uniform": (0.5, 0.7),
            "bound": (0.9, 1.0),
            "oracle": (0.7, 0.8),
            "mara": (0.7, 0.8),
        }.items()
        for e, v in enumerate(vals)
    ]
    shares = gap_shares(pd.DataFrame(rows), "uniform", ["bound", "oracle"]).set_index("scheduler")
    assert shares.at["mara", "bound"] == pytest.approx(0.15 / 0.35)
    assert shares.at["mara", "oracle"] == pytest.approx(1.0)
    assert shares.at["uniform", "bound"] == 0.0
    assert gap_shares(pd.DataFrame(rows), "edf", ["bound"]).empty


def test_the_default_reference_is_the_policy_then_lara() -> None:
    """summary.md pairs every scheduler with MARA when it is evaluated, else with LARA."""
    from mara_agents.evaluation.report import default_reference

    assert default_reference(["fifo", "lara", "mara", "laira"]) == "mara"
    assert default_reference(["fifo", "lara", "mara=my.pt"]) == "lara"
    assert default_reference(["fifo", "tiresias"]) == "fifo"


def test_episodes_without_a_task_are_named_not_silent(config, capsys) -> None:
    df = evaluate(["uniform"], [1e-300], 2, [0], config, workers=1, progress=False)
    assert (df["tasks"] == 0).all() and df["completion_rate"].isna().all()
    err = capsys.readouterr().err
    assert "load 1e-300: no task arrived in 2 of 2 episodes" in err
    assert "left out of means and intervals" in err
    evaluate(["uniform"], [1.0], 2, [0], config, workers=1, progress=False)
    assert "no task arrived" not in capsys.readouterr().err
