"""A validation learning curve: a run's saved checkpoints, each evaluated greedily on val.

How to run::

    python benchmarks/checkpoint_curve.py runs/mara_scratch/PPO_xxx [--every 2]
        [--episodes 8] [--loads 1.0] [--split val] [--baselines uniform,edf,random]
        [--nodes N] [--jobs philly] [--out runs/scratch_val_curve]

Training logs the completion rate of its own (sampled, train-split) episodes; this
exports every ``--every``-th checkpoint of a trial (``checkpoint_*`` directories, in
order; keep them with ``checkpoint.keep``), evaluates each with the harness on the same
``--episodes`` episodes per load (common random numbers) together with the baselines, and
writes ``OUT/curve.csv`` (one row per checkpoint x load: training iteration, training
time, node decisions, mean completion rate and its 95 % interval) and ``OUT/curve.png``.
The training time of a checkpoint is read from the trial's ``result.json``.  By default
the episodes are the training env's cluster size and workload; ``--nodes`` and ``--jobs``
(replayed days of a job trace, ``--split``'s days) change them.
"""

from __future__ import annotations

import argparse
import json
import pickle
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from mara_agents.evaluation.runner import evaluate
from mara_agents.evaluation.stats import mean_ci
from mara_agents.policy.inference import load_policy
from mara_agents.training.export import export_checkpoint
from mara_env.config import ClusterConfig


def checkpoints(trial: Path, every: int) -> list[Path]:
    found = sorted(trial.glob("checkpoint_*"))
    if not found:
        raise SystemExit(f"error: {trial}: no checkpoint_* directories")
    picked = found[::every]
    return picked if picked[-1] == found[-1] else [*picked, found[-1]]


def iteration_of(checkpoint: Path) -> int:
    """The training iteration a checkpoint was saved at (from its algorithm state)."""
    with (checkpoint / "algorithm_state.pkl").open("rb") as f:
        return int(pickle.load(f)["training_iteration"])


def plot_curve(curve: pd.DataFrame, refs: dict, path: Path, what: str) -> None:
    """The policy's completion rate per checkpoint against training time, one line per
    load, with each baseline (``refs[(name, load)] = (mean, ci)``) as a labelled level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for load in sorted(curve["load"].unique()):
        c = curve[curve["load"] == load]
        ax.errorbar(
            c["time_total_s"] / 60,
            c["completion_rate"],
            c["ci95"],
            marker="o",
            capsize=3,
            label=f"policy, load {load:g}",
        )
    for (name, load), (m, _) in refs.items():
        ax.axhline(m, ls="--", lw=0.8, color="gray")
        ax.annotate(
            f"{name} (load {load:g})",
            (0.01, m),
            xycoords=("axes fraction", "data"),
            ha="left",
            va="bottom",
            fontsize=8,
            color="dimgray",
        )
    ax.set_xlabel("training time (minutes)")
    ax.set_ylabel("completion rate")
    ax.set_title(what, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower center")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def replot(out: Path, what: str) -> None:
    """Redraw ``OUT/curve.png`` from ``OUT/curve.csv`` and ``OUT/baselines.csv``."""
    curve = pd.read_csv(out / "curve.csv")
    base = pd.read_csv(out / "baselines.csv")
    refs = {(r.scheduler, r.load): (r.completion_rate, r.ci95) for r in base.itertuples()}
    plot_curve(curve, refs, out / "curve.png", what)
    print(f"wrote {out / 'curve.png'}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("trial", type=Path, help="trial directory (runs/<name>/PPO_...)")
    p.add_argument("--every", type=int, default=1, help="evaluate every n-th checkpoint")
    p.add_argument("--episodes", type=int, default=8, help="episodes per load")
    p.add_argument("--loads", default="1.0", help="comma-separated loads")
    p.add_argument("--split", default="val", help="trace split of the evaluation episodes")
    p.add_argument("--baselines", default="uniform,edf,random", help="schedulers to add")
    p.add_argument("--workers", type=int, default=2, help="evaluation processes")
    p.add_argument(
        "--nodes", type=int, default=None, help="cluster size (default: the training env's)"
    )
    p.add_argument(
        "--jobs",
        default=None,
        help="replay days of this job trace ('philly' or a `mara jobs import` table) "
        "instead of the synthetic workload",
    )
    p.add_argument("--out", type=Path, default=None, help="output directory (default: TRIAL)")
    p.add_argument(
        "--replot",
        action="store_true",
        help="only redraw OUT/curve.png from the CSVs an earlier run wrote",
    )
    args = p.parse_args()
    what = f"{args.split}{', ' + args.jobs + ' days' if args.jobs else ''}, greedy, "
    what += f"{args.episodes} episodes" + (f", {args.nodes} nodes" if args.nodes else "")
    if args.replot:
        replot(args.out or args.trial, what)
        return
    if args.every < 1 or args.episodes < 1 or (args.nodes is not None and args.nodes < 1):
        p.error("--every, --episodes and --nodes: expected integers >= 1")
    loads = [float(x) for x in args.loads.split(",")]
    out = args.out or args.trial
    out.mkdir(parents=True, exist_ok=True)
    results = [json.loads(x) for x in (args.trial / "result.json").read_text().splitlines()]
    by_iter = {r["training_iteration"]: r for r in results}
    picked = checkpoints(args.trial, args.every)
    with tempfile.TemporaryDirectory() as tmp:
        paths = [export_checkpoint(ck, Path(tmp) / f"{ck.name}.pt") for ck in picked]
        specs = [f"mara={path}" for path in paths]
        # every checkpoint of a run has the first one's cluster and slots
        policy = load_policy(paths[0])
        nodes = args.nodes or policy.trained_nodes
        env = policy.meta.get("env", {})
        base = [s for s in args.baselines.split(",") if s]
        config = ClusterConfig(
            num_nodes=nodes,
            num_slots=policy.slots_for(nodes),
            horizon=env.get("horizon", 120),
            split=args.split,
            jobs=args.jobs,
        )
        df = evaluate(
            [*specs, *base],
            loads,
            args.episodes,
            config=config,
            workers=args.workers,
            progress=True,
        )
    rows = []
    for spec, ck in zip(specs, picked):
        it = iteration_of(ck)
        r = by_iter.get(it, {})
        for load in loads:
            v = df[(df["scheduler"] == spec) & (df["load"] == load)]["completion_rate"]
            m, h = mean_ci(v.to_numpy())
            rows.append(
                {
                    "checkpoint": ck.name,
                    "training_iteration": it,
                    "time_total_s": r.get("time_total_s", np.nan),
                    "node_decisions": r.get("mara", {}).get("node_decisions", np.nan),
                    "load": load,
                    "completion_rate": m,
                    "ci95": h,
                }
            )
    curve = pd.DataFrame(rows)
    curve.to_csv(out / "curve.csv", index=False)
    refs = {}
    for name in base:
        for load in loads:
            v = df[(df["scheduler"] == name) & (df["load"] == load)]["completion_rate"]
            refs[(name, load)] = mean_ci(v.to_numpy())
    pd.DataFrame(
        [
            {"scheduler": n, "load": ld, "completion_rate": m, "ci95": h}
            for (n, ld), (m, h) in refs.items()
        ]
    ).to_csv(out / "baselines.csv", index=False)
    plot_curve(curve, refs, out / "curve.png", what)
    print(curve.to_string(index=False))
    for (name, load), (m, h) in refs.items():
        print(f"{name} load {load:g}: {m:.3f} ± {h:.3f}")
    print(f"wrote {out / 'curve.csv'}, {out / 'curve.png'}, {out / 'baselines.csv'}")


if __name__ == "__main__":
    main()
