"""Behaviour cloning needs no ray: the experiment schema and the cloning path run with ray
blocked, as they must for ``mara train --pretrain-only`` on the ``predictor`` extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# Runs in a fresh interpreter whose imports of ray fail as if it were not installed.
CLONE_WITHOUT_RAY = """
import sys
from importlib.abc import MetaPathFinder
from pathlib import Path


class NoRay(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoRay())
import mara_agents.training.clone
from mara_agents.training.experiment import load_experiment, parse_experiment
from mara_env.config import ConfigError

for path in sorted(Path("experiments").glob("*.yaml")):
    load_experiment(path)
tiny = {"name": "t", "env": {"num_nodes": 2, "num_slots": 2, "horizon": 4}}
try:
    parse_experiment({**tiny, "rllib": {"training": {"lr": "fast"}}})
except ConfigError as e:
    assert "rllib.training.lr='fast': expected" in str(e), e
else:
    raise AssertionError("rllib.training.lr='fast' was accepted")
pretrain = {"scheduler": "uniform", "episodes": 1, "epochs": 1, "value_epochs": 1}
exp = parse_experiment({**tiny, "pretrain": pretrain})
out = mara_agents.training.clone.pretrain(exp, Path(sys.argv[1]) / "t.pt", log=lambda _: None)
assert out.is_file(), out
ray = sorted(m for m in sys.modules if m == "ray" or m.startswith("ray."))
assert not ray, ray
"""


def test_cloning_loads_experiments_and_clones_with_ray_blocked(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CLONE_WITHOUT_RAY, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "t.pt").is_file()
