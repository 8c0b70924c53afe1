"""The main job: evaluate the shipped predictor and policy against the baselines.

Writes under ``out``: ``predictor/`` (flow vs WLS vs Optimus per family on the test
split), ``schedulers/`` (the harness outputs at every load), ``replayed/`` (the same on
replayed test days of a cluster's job trace), ``episode_gantt.png`` (one episode's node
allocation over time for MARA and LARA) and ``summary.md`` with the headline tables.
``full=True`` first retrains the predictor and the policy.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from mara_env.atomic import atomic_write
from mara_env.config import DEADLINE_MODELS, ClusterConfig, ConfigError
from mara_env.traces import load_traces

if TYPE_CHECKING:
    from flow_predictor.train import TrainConfig
    from mara_agents.training.experiment import Experiment

# Every scheduler of docs/results.md's tables (``mara reproduce --all``).  The clairvoyant
# bound (``bound``: one MILP per episode, 1-4 s each under env v3's long padded deadlines)
# is left out; add it with --schedulers.
ALL_SPECS = (
    "mara",
    # references: planning on exact work
    "oracle",
    "flow_share:predictor=exact",
    "hedge:predictor=exact",  # the planner below on exact work: what prediction costs it
    # the schedulers people would pick instead, and the literature's
    "laira",
    "lara",
    "lara:predictor=flow",  # MARA's flow predictor inside LARA's planner
    "elasticflow",  # fed the flow predictor (its val-tuned default)
    "elasticflow:predictor=wls",
    "tiresias",
    "fifo",
    # rules of thumb and our own heuristic
    "flow_share",
    "hedge",  # admission and counts on the distribution the cluster's history chose
    "hedge:urgency=0",  # ... without weighing what waiting would lose (mara_v18's teacher)
    "hedge:predictor=task",  # ... on the calibrated remaining-work model (synthetic: hedge)
    "hedge:predictor=task-no-flow",  # ... on that model fitted without the flow model
    "hedge:predictor=flow+deadline",  # ... on the flow samples fused with the deadline prior
    "hedge:miss_cost=1",  # ... with a miss charged to the deadline (the price before history)
    "hedge:predictor=flow",  # the same planner on the flow predictor's samples alone
    "hedge:predictor=deadline",  # ... and on the deadline prior alone
    "uniform",
    "edf",
    "least_slack",
    "random",
)
# The main job's headline (plain ``mara reproduce``, about 8 minutes on 2 cores): MARA,
# its teacher (on the calibrated model, without urgency, and on exact work), LARA's
# planner on exact work, the literature's deadline-aware schedulers and the rules of
# thumb.  The schedulers that plan through the flow model (the costliest per episode after
# MARA), hedge on the deadline prior alone and the deadline-model table come with --all.
DEFAULT_SPECS = (
    "mara",
    "oracle",
    "hedge:predictor=exact",
    "laira",
    "lara",
    "tiresias",
    "fifo",
    "hedge",
    "hedge:urgency=0",
    "uniform",
    "edf",
)
DEFAULT_LOADS = (1.0, 1.5, 2.0)
# The replayed job-trace table (docs/jobs.md): these of the specs, on these loads.
REPLAY_SPECS = (
    "mara",
    "oracle",
    "hedge:predictor=exact",
    "hedge",
    "hedge:urgency=0",
    "hedge:predictor=task",
    "hedge:predictor=flow+deadline",
    "hedge:predictor=flow",
    "hedge:predictor=deadline",
    "laira",
    "lara",
    "flow_share",
    "uniform",
    "edf",
)
REPLAY_LOADS = (1.0, 2.0)
# The deadline-model table (docs/results.md opens with it): these of the specs under every
# deadline model of env v3 (the default's figures come from the main table's episodes).
DEADLINE_SPECS = (
    "mara",
    "hedge",
    "hedge:urgency=0",
    "hedge:predictor=flow+deadline",
    "hedge:miss_cost=1",
    "hedge:predictor=deadline",
    "hedge:predictor=flow",
    "hedge:predictor=exact",
    "uniform",
    "flow_share",
    "laira",
    "lara",
)
DEFAULT_JOBS = "philly"
DEFAULT_JOBS_NODES = 16
DEFAULT_JOBS_EPISODES = 20
# The shipped policy's recipe, found from the package (experiments/ sits beside it in a
# source checkout), never from the working directory: the clone of RECIPE, then the PPO
# stages of PPO_RECIPES in turn, each from the previous one's weights, then the DAgger
# rounds of each of DAGGER_RECIPES in turn, the first from the last PPO stage.
RECIPE = Path(__file__).resolve().parents[1] / "experiments" / "mara_hedge.yaml"
PPO_RECIPES = (RECIPE.with_name("mara_hedge_group.yaml"),)
DAGGER_STAGES = (
    "mara_hedge_jobs",
    "mara_plan_gap",
    "mara_miss_cost",
    "mara_task",
    "mara_cluster",
    "mara_wait",
)
DAGGER_RECIPES = tuple(RECIPE.with_name(f"{name}.yaml") for name in DAGGER_STAGES)
# Beside each PPO stage's run: the SHA-256 of the weights the stage started from.
ORIGIN = "init_weights.sha256"


def _step(title: str) -> float:
    print(f"\n== {title}", flush=True)
    return time.perf_counter()


def _done(start: float) -> None:
    print(f"   done in {time.perf_counter() - start:.0f} s", flush=True)


def retrain(
    out: Path,
    recipe: Path = RECIPE,
    predictor: TrainConfig | None = None,
    ppo_recipe: Path | Sequence[Path] | None = PPO_RECIPES,
    dagger_recipes: Sequence[Path] = DAGGER_RECIPES,
) -> Path:
    """Retrain the shipped policy's recipe and the predictor under ``out/retrained``.

    The shipped policy (``docs/training.md``) is the behaviour clone of ``recipe`` (and the
    DAgger rounds the YAML asks for), resumable as ``mara train --pretrain-only --resume``,
    then the PPO stage of each YAML of ``ppo_recipe`` in turn (``None``: of ``recipe``), the
    first from the clone, each later one from the weights (critic included) of the one
    before, each for its YAML's ``stop`` budget.  Every stage's final checkpoint is exported
    to ``out/retrained/<name>.pt`` (an existing export is reused when its recipe and its
    starting weights are unchanged, refused otherwise); then the DAgger rounds of each YAML
    of ``dagger_recipes`` in turn, each from the last export (its ``init_weights``
    replaced), exported to ``out/retrained/<name>.pt``; the last policy file is returned.
    PPO stages that stop on wall-clock time with two sampling processes land near, not on,
    the shipped weights.  The policy observes through the shipped flow checkpoint, as the shipped
    policy does; the retrained predictor (``predictor``'s
    settings, default the shipped recipe ``SHIPPED_RECIPE``; written to
    ``out/retrained/flow.pt``) is made for comparison.  Both resume finished stages.
    """
    from flow_predictor.train import SHIPPED_RECIPE
    from flow_predictor.train import train as train_predictor
    from mara_agents.extras import require
    from mara_agents.training.clone import pretrain
    from mara_agents.training.experiment import load_experiment

    require("rllib")
    if ppo_recipe is None:
        stages = [Path(recipe)]
    elif isinstance(ppo_recipe, (str, Path)):
        stages = [Path(ppo_recipe)]
    else:
        stages = [Path(p) for p in ppo_recipe]
    finish = [Path(p) for p in dagger_recipes]
    for path in (Path(recipe), *stages, *finish):
        if not path.is_file():
            raise ConfigError(
                f"recipe {str(path)!r} not found: reproduce --full needs a source checkout "
                "of MARA (experiments/ is not installed with the package)"
            )
    exp = load_experiment(recipe)
    if exp.pretrain.episodes <= 0:
        raise ConfigError(f"{recipe}: expected pretrain.episodes > 0 (the shipped recipe)")
    root = Path(out).absolute() / "retrained"
    print(f"   policy: behaviour cloning of {exp.pretrain.scheduler} ({recipe})", flush=True)
    weights = pretrain(exp, root / "train" / f"{exp.name}_pretrain.pt", resume=True)
    start = "the clone"
    for path in stages:
        weights = _ppo_stage(path, weights, start, root)
        start = weights.name
    for path in finish:
        weights = _dagger_stage(path, weights, root)
    cfg = dataclasses.replace(predictor or SHIPPED_RECIPE, out=str(root / "flow.pt"))
    print(f"   predictor: flow matching on the {cfg.split} split -> {cfg.out}", flush=True)
    # resume only what exists: the predictor's resume needs its .last.pt
    train_predictor(cfg, resume=(root / "flow.last.pt").is_file())
    return weights


def _ppo_stage(path: Path, weights: Path, start: str, root: Path) -> Path:
    """The PPO stage of the YAML at ``path`` from ``weights``, exported to
    ``root/<name>.pt`` (reused when it was trained from the same settings and weights)."""
    from mara_agents.outputs import file_digest
    from mara_agents.training.experiment import load_experiment
    from mara_agents.training.records import RECORD, check_unchanged

    stage = load_experiment(path)
    policy = root / f"{stage.name}.pt"
    ppo = dataclasses.replace(
        stage,
        pretrain=dataclasses.replace(stage.pretrain, episodes=0, init_weights=str(weights)),
        checkpoint=dataclasses.replace(stage.checkpoint, at_end=True),
    )
    record = root / "train" / stage.name / RECORD
    origin = root / "train" / stage.name / ORIGIN  # the digest of the weights it began from
    if policy.is_file() and record.is_file():
        check_unchanged(ppo, record)  # the recipe's PPO settings are those of the export
        _check_origin(origin, weights, policy, f"delete {policy} to retrain this stage")
        print(f"   policy: reusing {policy}", flush=True)
    else:
        print(f"   policy: PPO from {start} ({path}), stop {stage.stop}", flush=True)
        _train_and_export(ppo, root / "train", policy)
        origin.write_text(file_digest(weights) + "\n")
    return policy


def _check_origin(origin: Path, weights: Path, made: Path, undo: str) -> None:
    """ConfigError unless ``made`` began from the weights ``weights`` holds now (``origin``
    records their digest, when it exists); ``undo`` says how to redo it from them."""
    from mara_agents.outputs import file_digest

    if origin.is_file() and origin.read_text().strip() != file_digest(weights):
        raise ConfigError(
            f"{made} was trained from other weights than {weights} holds now (the stage "
            f"before it was retrained); expected its starting weights unchanged: {undo} "
            "from them"
        )


def _dagger_stage(path: Path, weights: Path, root: Path) -> Path:
    """The DAgger rounds of the YAML at ``path`` from ``weights``, exported to
    ``root/<name>.pt``; finished rounds are reused while they began from the same weights."""
    from mara_agents.outputs import file_digest
    from mara_agents.training.clone import pretrain
    from mara_agents.training.experiment import load_experiment
    from mara_agents.training.export import export_warm_start

    stage = load_experiment(path)
    stage = dataclasses.replace(
        stage, pretrain=dataclasses.replace(stage.pretrain, init_weights=str(weights))
    )
    out = root / "train" / f"{stage.name}_pretrain.pt"
    origin = out.with_name(f"{stage.name}_{ORIGIN}")
    undo = f"delete {out.parent / stage.name}_pretrain* to redo its rounds"
    _check_origin(origin, weights, out, undo)
    print(f"   policy: DAgger rounds from {weights.name} ({path})", flush=True)
    origin.parent.mkdir(parents=True, exist_ok=True)
    origin.write_text(file_digest(weights) + "\n")
    state = pretrain(stage, out, resume=True)
    return export_warm_start(state, stage, root / f"{stage.name}.pt")


def _train_and_export(ppo: Experiment, out: Path, policy: Path) -> None:
    """Run a PPO stage (from its init_weights); export its last checkpoint to ``policy``."""
    from mara_agents.training.export import export_checkpoint
    from mara_agents.training.train import train

    result = train(ppo, out=out, verbose=0)[0]
    if result.error or result.checkpoint is None:
        raise RuntimeError(f"PPO stage of {ppo.name} failed: {result.error}")
    export_checkpoint(result.checkpoint.path, policy)


def evaluate_predictors(out: Path) -> pd.DataFrame:
    """Flow vs WLS vs Optimus on the test split; writes CSV + plot under ``out``."""
    from flow_predictor import load_predictor
    from flow_predictor.evaluate import evaluate_to_dir
    from flow_predictor.optimus import OptimusPredictor
    from flow_predictor.wls import WLSPredictor

    traces = load_traces(None, split="test")
    methods = [load_predictor(), WLSPredictor(), OptimusPredictor()]
    return evaluate_to_dir(methods, traces, out)


def predictor_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per family x method: metrics averaged over prefix fractions, and flow / WLS ratio."""
    avg = metrics.groupby(["family", "method"])[["mae_log_ratio", "crps", "coverage80"]].mean()
    table = avg.unstack("method")["mae_log_ratio"]
    if {"flow", "wls"} <= set(table.columns):
        table["flow/wls"] = table["flow"] / table["wls"]
    table["flow coverage80"] = avg["coverage80"].unstack("method").get("flow")
    return table


def markdown_table(table: pd.DataFrame) -> str:
    """A small DataFrame as a Markdown table, numbers to three decimals."""
    cols = [str(c) for c in table.columns]
    lines = ["| " + " | ".join([str(table.index.name or ""), *cols]) + " |"]
    lines.append("|" + "---|" * (len(cols) + 1))
    for idx, row in table.iterrows():
        cells = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join([str(idx), *cells]) + " |")
    return "\n".join(lines)


def _nested(summary: str) -> str:
    """The harness's ``summary.md`` nested under a section of ours (headings one deeper)."""
    return "\n".join(
        "#" + line if line.startswith("## ") else line
        for line in summary.splitlines()
        if not line.startswith("# ")
    )


def gantt(config: ClusterConfig, seed: int, specs: Sequence[str], path: Path) -> None:
    """Node x tick allocation of one episode for each spec, tasks in colours."""
    from mara_agents.evaluation.registry import expand_alias
    from mara_agents.evaluation.report import plot_allocation
    from mara_agents.evaluation.runner import run_spec

    traces = load_traces(config.traces, split=config.split)
    panels = []
    for name in specs:
        m = run_spec(expand_alias(name), config, traces, seed, record=True)
        title = (
            f"{name}: {m['completed']}/{m['tasks']} tasks completed, "
            f"{m['reassignments']} re-assignments (white = idle)"
        )
        panels.append((title, m["allocation"]))
    plot_allocation(panels, path)


DEFAULT_EPISODES = 100  # per load: 30 cannot resolve a 1-point margin


def deadline_models_table(frames: dict[str, pd.DataFrame]) -> str:
    """Markdown: each scheduler's completion rate per deadline model and load, and its
    paired difference from uniform share on the same episodes (points, 95 % interval)."""
    from mara_agents.evaluation.stats import paired_differences, summarise

    loads = sorted(next(iter(frames.values()))["load"].unique())
    head = "| scheduler | " + " | ".join(f"{m}, load {load:g}" for m in frames for load in loads)
    lines = [
        "## Deadline models side by side (test split, paired against uniform share)\n",
        "Completion rate, and below it the points over uniform share on the same episodes "
        "(95 % interval). The scheduler is never told the model.\n",
        head + " |",
        "|---" * (1 + len(frames) * len(loads)) + "|",
    ]
    rates = {m: summarise(f).set_index(["scheduler", "load"]) for m, f in frames.items()}
    diffs = {
        m: paired_differences(f, "uniform").set_index(["scheduler", "load"])
        for m, f in frames.items()
    }
    for spec in dict.fromkeys(next(iter(frames.values()))["scheduler"]):
        cells = []
        for m in frames:
            for load in loads:
                rate = rates[m].loc[(spec, load), "mean"]
                if spec == "uniform":
                    cells.append(f"{rate:.3f}")
                    continue
                d = diffs[m].loc[(spec, load)]
                cells.append(f"{rate:.3f}<br>{100 * d['diff']:+.1f} ± {100 * d['ci95']:.1f}")
        lines.append(f"| {spec} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# The plots the summary links, each only when this run wrote it
PLOTS = (
    "schedulers/completion_vs_load.png",
    "schedulers/completion_by_family.png",
    "predictor/predictor_error.png",
    "episode_gantt.png",
    "replayed/day_gantt.png",
)


def reproduce(
    out: str | Path = "results",
    episodes: int = DEFAULT_EPISODES,
    loads: Sequence[float] = DEFAULT_LOADS,
    seeds: Sequence[int] = (0,),
    specs: Sequence[str] = DEFAULT_SPECS,
    workers: int | None = None,
    full: bool = False,
    skip_predictor: bool = False,
    jobs: str | None = DEFAULT_JOBS,
    jobs_nodes: int = DEFAULT_JOBS_NODES,
    jobs_episodes: int = DEFAULT_JOBS_EPISODES,
    deadline_models: bool = False,
) -> str:
    """Run the whole evaluation; returns the summary markdown (also in out/summary.md).

    With ``deadline_models`` the :data:`DEADLINE_SPECS` among ``specs`` (uniform share and
    at least one other) also run under every other deadline model of env v3 on the same
    seeds, for the table that opens docs/results.md.  With ``jobs`` (a shipped job trace's
    name or a jobs table; None: skipped) the :data:`REPLAY_SPECS` among ``specs`` also run
    on ``jobs_episodes`` episodes of its test days per load on ``jobs_nodes`` nodes,
    written under ``out/replayed``."""
    from mara_agents.evaluation.report import default_reference, summary_markdown
    from mara_agents.evaluation.runner import evaluate
    from mara_agents.training.records import check_out

    out = check_out(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if full:
        t = _step("retraining predictor and policy (hours on 2 cores; resumable)")
        specs = [*specs, f"mara={retrain(out)}"]
        _done(t)
    parts = ["# MARA reproduction\n"]
    if not skip_predictor:
        t = _step("predictor: flow matching vs WLS vs Optimus, test split")
        table = predictor_table(evaluate_predictors(out / "predictor"))
        parts.append(
            "## Remaining-work prediction (test split, MAE of log ratio, mean over prefix "
            "fractions 10/20/40/60%)\n\n" + markdown_table(table) + "\n"
        )
        print(table.to_string(float_format=lambda v: f"{v:.3f}"))
        _done(t)
    t = _step(f"schedulers: {', '.join(specs)} at loads {list(loads)}, {episodes} episodes, test")
    config = ClusterConfig(split="test")
    # every scheduler paired against the shipped policy (against LARA without it)
    reference = default_reference(list(specs))
    df = evaluate(
        list(specs),
        loads,
        episodes,
        seeds,
        config=config,
        workers=workers,
        out_dir=out / "schedulers",
        reference=reference,
    )
    parts.append(
        "## Task-completion rate (test split)\n\n" + _nested(summary_markdown(df, reference))
    )
    _done(t)
    models = [s for s in DEADLINE_SPECS if s in specs]
    if deadline_models and "uniform" in models and len(models) > 1:
        t = _step(f"deadline models: {', '.join(models)}, {episodes} episodes, test")
        frames = {config.deadline_model: df[df["scheduler"].isin(models)]}
        for model in DEADLINE_MODELS:
            if model != config.deadline_model:
                frames[model] = evaluate(
                    models,
                    loads,
                    episodes,
                    seeds,
                    config=config.replace(deadline_model=model),
                    workers=workers,
                    out_dir=out / "deadline_models" / model,
                    reference="uniform",
                )
        table = deadline_models_table(frames)
        atomic_write(out / "deadline_models.md", table.encode())
        parts.insert(1, table)
        _done(t)
    if jobs is not None:
        replay_specs = [s for s in REPLAY_SPECS if s in specs] or list(specs)
        t = _step(
            f"replayed job trace {jobs!r}: {', '.join(replay_specs)}, {jobs_nodes} nodes, "
            f"loads {list(REPLAY_LOADS)}, {jobs_episodes} test days' episodes"
        )
        replay = ClusterConfig(split="test", jobs=jobs, num_nodes=jobs_nodes)
        rdf = evaluate(
            replay_specs,
            REPLAY_LOADS,
            jobs_episodes,
            seeds,
            config=replay,
            workers=workers,
            out_dir=out / "replayed",
            reference=default_reference(replay_specs),
        )
        parts.append(
            f"## Task-completion rate on replayed days of the job trace {jobs!r} "
            f"(test days, {jobs_nodes} nodes)\n\n"
            + _nested(summary_markdown(rdf, default_reference(replay_specs)))
        )
        _done(t)
    t = _step("example episode allocation (Gantt chart)")
    from mara_agents.evaluation.registry import is_bound_spec
    from mara_agents.evaluation.runner import episode_seed

    schedules = [s for s in specs if not is_bound_spec(s)]  # a bound has no allocation
    shown = [s for s in ("mara", "lara") if s in schedules] or schedules[:2]
    gantt(
        config.replace(load=loads[0]),
        episode_seed(seeds[0], loads[0], 0),
        shown,
        out / "episode_gantt.png",
    )
    if (
        jobs is not None
    ):  # the first replayed test day of the table, as uniform share and MARA run it
        day = [s for s in ("mara", "uniform") if s in schedules] or schedules[:2]
        first = REPLAY_LOADS[0]
        gantt(
            replay.replace(load=first),
            episode_seed(seeds[0], first, 0),
            day,
            out / "replayed" / "day_gantt.png",
        )
    _done(t)
    written = ", ".join(f"`{p}`" for p in PLOTS if (out / p).is_file())  # no link to nothing
    parts.append(
        f"Plots: {written}; TensorBoard: `tensorboard --logdir "
        f"{out / 'schedulers' / 'tb'}`.\n\nWall time: {time.perf_counter() - started:.0f} s.\n"
    )
    summary = "\n".join(parts)
    atomic_write(out / "summary.md", summary.encode())
    return summary
