"""Leave-one-family-out evaluation: how the flow model does on a family it never saw.

For every trace family ``F`` of the library a model is trained (and selected on
validation) without ``F``, then scored on ``F``'s ``eval_split`` against the WLS
baseline on the same instances.  The result is one row per held-out family with the
flow model's and WLS's metrics (:data:`LOFO_COLUMNS`); ``mae_vs_wls < 1`` means the flow
model generalised better than the power-law fit to curves unlike any it was trained on.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from flow_predictor.train import TrainConfig

LOFO_COLUMNS = (
    "held_out",
    "mae_flow",
    "mae_wls",
    "mae_vs_wls",
    "crps_flow",
    "crps_wls",
    "coverage50",
    "coverage80",
    "n",
)


def leave_one_family_out(
    cfg: TrainConfig,
    out: str | Path,
    families: list[str] | None = None,
    eval_split: str = "test",
    samples: int | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Train without each family in turn and score on it; writes ``<out>/<family>/flow.pt``
    and ``<out>/lofo.csv``; returns the table (:data:`LOFO_COLUMNS`); ``samples``: flow
    samples per prediction (None: :data:`~flow_predictor.remaining.FLOW_SAMPLES`)."""
    from flow_predictor.checkpoint import load_predictor
    from flow_predictor.evaluate import evaluate_all
    from flow_predictor.remaining import FLOW_SAMPLES
    from flow_predictor.train import train
    from flow_predictor.wls import WLSPredictor
    from mara_env.traces import TraceError, load_traces

    out = Path(out)
    have = sorted(set(load_traces(cfg.traces, split=cfg.split).families))
    families = families or have
    unknown = [f for f in families if f not in have]
    if unknown:
        raise TraceError(f"lofo: unknown family {unknown}; the {cfg.split} split has {have}")
    if len(have) < 2:
        raise TraceError(f"lofo: the library has one family ({have}); nothing to leave out")
    rows = []
    for family in families:
        run = dataclasses.replace(
            cfg, exclude_families=(family,), out=str(out / family / "flow.pt")
        )
        train(run, progress=progress)
        held_out = load_traces(cfg.traces, split=eval_split, families=[family])
        flow = load_predictor(run.out, n_samples=samples or FLOW_SAMPLES)
        table = evaluate_all([flow, WLSPredictor()], held_out).families.set_index("method")
        f, w = table.loc["flow"], table.loc["wls"]
        rows.append(
            {
                "held_out": family,
                "mae_flow": f["mae_log_ratio"],
                "mae_wls": w["mae_log_ratio"],
                "mae_vs_wls": f["mae_vs_wls"],
                "crps_flow": f["crps"],
                "crps_wls": w["crps"],
                "coverage50": f["coverage50"],
                "coverage80": f["coverage80"],
                "n": int(f["n"]),
            }
        )
        # written after every family: a long run that stops keeps what it has
        pd.DataFrame(rows, columns=list(LOFO_COLUMNS)).to_csv(out / "lofo.csv", index=False)
    return pd.DataFrame(rows, columns=list(LOFO_COLUMNS))
