"""Tune hedge's price of a miss and its distribution on a cluster's own history, and ship
the tuning.

How to run:   python benchmarks/tune_history.py [--cluster CLUSTER.yaml ...] [--write]

For each cluster (no ``--cluster``: the default settings; ``default`` names them among
files), :func:`mara_agents.evaluation.tuning.tune_history` (what ``mara history fit``
runs for one cluster) plays ``hedge`` with each price of
:data:`~mara_agents.planning.history.MISS_COSTS` on the cluster's history (train split,
both shipped workloads, loads 1 / 1.5 / 2, 20 episodes each, paired), then at the price
kept with each distribution of :data:`~mara_agents.planning.history.DISTRIBUTIONS` on
each workload's own episodes, and prints each lead with its 95 % t-interval per workload
and load, and what is kept.  The clusters run side by side, one process each.
``--write`` replaces those clusters' records in
``mara_agents/planning/history_choices.json``, the tunings ``hedge`` and the policy read
instead of tuning again (about 7 minutes a cluster on one core).  The validation and test
splits are never touched.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from mara_agents.commands.history import lead_lines
from mara_agents.evaluation.tuning import tune_history
from mara_agents.planning.history import SHIPPED_CHOICES, history_settings, write_choices
from mara_env.config import ClusterConfig, load_cluster_file


def _settings(name: str) -> dict[str, Any]:
    """The history settings of cluster file ``name`` (``default``: none), as
    :meth:`~mara_agents.planning.history.ClusterHistory.of` looks them up: a key at its
    default or one that picks an episode is left out, so the record written is read."""
    if name == "default":
        return {}
    return history_settings(ClusterConfig.from_dict(load_cluster_file(name)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--cluster",
        action="append",
        default=None,
        metavar="CLUSTER.yaml",
        help="a cluster file (ClusterConfig keys; 'default': the default settings); "
        "repeat for several (default: the default settings alone)",
    )
    p.add_argument(
        "--write",
        action="store_true",
        help=f"replace these clusters' records in {SHIPPED_CHOICES.name}",
    )
    args = p.parse_args()
    names = args.cluster or ["default"]
    settings = [_settings(n) for n in names]
    with ProcessPoolExecutor(max_workers=len(names)) as pool:
        records = list(pool.map(tune_history, settings))
    for name, record in zip(names, records):
        print(lead_lines(name, record))
    if args.write:
        write_choices(records)
        print(f"wrote {SHIPPED_CHOICES}")


if __name__ == "__main__":
    main()
