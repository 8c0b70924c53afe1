"""Plot the val learning curves of several `examples/torchrl_marl.py` runs on one figure.

How to run::

    python examples/plot_marl_curves.py runs/marl/mappo_stay_60 runs/marl/ippo_stay_60 \
        --out docs/img/marl_60min_curves.png

Each run directory holds the ``curve.csv`` and ``result.json`` the script writes; the
schedulers' completion on the final evaluation episodes (EDF, uniform share, the
``random`` scheduler and the random policy) are drawn as horizontal lines from the first
run's ``result.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories (--out of each run)")
    parser.add_argument("--out", type=Path, required=True, help="PNG to write")
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    first = None
    for run in args.runs:
        result = json.loads((run / "result.json").read_text())
        first = first or result
        cfg = result["config"]
        name = run.name  # the folder says what the run was
        curve = pd.read_csv(run / "curve.csv")
        final = result[cfg["algorithm"]]
        ax.plot(curve["wall_s"] / 60, curve["val_completion"], label=f"{name} (final {final:.3f})")
    for key, style in (("uniform", "--"), ("edf", "-."), ("random", ":"), ("random_policy", ":")):
        if key in first:
            ax.axhline(first[key], linestyle=style, color="grey", linewidth=1)
            ax.annotate(key, (0, first[key]), fontsize=8, va="bottom", color="grey")
    ax.set_xlabel("training minutes")
    ax.set_ylabel("val completion rate (greedy)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    plt.close(fig)
    return args.out


if __name__ == "__main__":
    print(main())
