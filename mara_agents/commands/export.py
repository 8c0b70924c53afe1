"""Export the shared policy of an RLlib checkpoint to a small torch-only policy file.

The file holds the network weights, its hyper-parameters, the observation layout, the
env config it was trained on and a versioned header; load it with
``mara_agents.policy.inference.load_policy(path)`` (no Ray runtime needed) or evaluate it with
``mara evaluate --schedulers mara=POLICY.pt``.  A behaviour-cloning warm start
(``OUT/<name>_pretrain.pt``) is exported the same way with ``--experiment FILE.yaml``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "checkpoint",
        metavar="CHECKPOINT",
        help="RLlib checkpoint directory (e.g. runs/mara/PPO_.../checkpoint_000009), "
        "or a warm-start state dict (runs/<name>_pretrain.pt) together with --experiment",
    )
    parser.add_argument(
        "--experiment",
        metavar="FILE.yaml",
        default=None,
        help="experiment the warm-start state dict was trained for (only for a .pt CHECKPOINT)",
    )
    parser.add_argument(
        "--out", required=True, metavar="POLICY.pt", help="policy file to write (a new name)"
    )
    parser.add_argument("--force", action="store_true", help="replace an existing POLICY.pt")


def run(args: argparse.Namespace) -> int:
    from mara_agents.commands import checks
    from mara_agents.outputs import OutputError, claim_file
    from mara_agents.policy.inference import load_policy
    from mara_agents.policy.policy_file import PolicyFileError
    from mara_agents.training.experiment import load_experiment
    from mara_agents.training.export import (
        export_checkpoint,
        export_warm_start,
        warm_start_state,
    )
    from mara_env.config import ConfigError

    checkpoint = Path(args.checkpoint)
    try:
        if not checkpoint.exists():
            raise checks.UsageError(
                f"CHECKPOINT {checkpoint}: no such file or directory; expected an RLlib "
                "checkpoint directory, or a warm-start state dict with --experiment"
            )
        if checkpoint.is_file() and not args.experiment:
            raise checks.UsageError(
                f"CHECKPOINT {checkpoint} is a file: exporting a warm-start state dict needs "
                "--experiment FILE.yaml"
            )
        if checkpoint.is_file():
            warm_start_state(checkpoint)  # a file of another kind is named before any work
        with claim_file(args.out, command="export", force=args.force) as out:
            if checkpoint.is_file():
                path = export_warm_start(checkpoint, load_experiment(args.experiment), out)
            else:
                path = export_checkpoint(checkpoint, out)
    except (checks.UsageError, ConfigError, FileNotFoundError, PolicyFileError, OutputError) as exc:
        print(f"mara export: error: {exc}", file=sys.stderr)
        return 2
    policy = load_policy(path)
    size = path.stat().st_size / 1024
    params = sum(p.numel() for p in policy.net.parameters())
    print(f"wrote {path} ({size:.0f} KiB, {params} parameters, wrapper={policy.wrapper})")
    return 0
