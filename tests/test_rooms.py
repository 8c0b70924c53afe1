"""What each room of ``mara_agents`` may import: evaluation and baselines neither torch nor
ray, the policy runtime no ray; training and live mode's worker pool are the only places
that bring ray (live's trainers and workers need torch only, its job files, journal and
cluster book-keeping neither).

Each room's every module is imported in a fresh interpreter; the modules it must not load
are then looked for in ``sys.modules`` (as ``tests/env/test_env.py`` guards ``mara_env``).
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import mara_agents

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "mara_agents.evaluation": ("torch", "ray"),
    "mara_agents.baselines": ("torch", "ray"),
    "mara_agents.scalars": ("torch", "ray"),
    "mara_agents.outputs": ("torch", "ray"),
    "mara_agents.policy": ("ray",),
    "mara_agents.live.trainers": ("ray",),
    "mara_agents.live.worker": ("ray",),
    "mara_agents.live.jobfile": ("torch", "ray"),
    "mara_agents.live.journal": ("torch", "ray"),
    "mara_agents.live.cluster": ("torch", "ray"),
}


def _modules(room: str) -> list[str]:
    """``room`` and every module inside it."""
    path = ROOT / room.replace(".", "/")
    if not path.is_dir():
        return [room]
    return [room, *(f"{room}.{m.name}" for m in pkgutil.iter_modules([str(path)]))]


def test_the_rooms_are_the_ones_the_docs_name() -> None:
    rooms = {m.name for m in pkgutil.iter_modules(mara_agents.__path__) if m.ispkg}
    assert rooms == {"policy", "training", "evaluation", "baselines", "live", "commands"}


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_a_room_imports_only_what_it_may(room: str) -> None:
    modules = _modules(room)
    banned = FORBIDDEN[room]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"bad = sorted({{m.split('.')[0] for m in sys.modules}} & set({banned!r}))\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, f"{room} imports {banned}: {proc.stderr[-2000:]}"


def test_the_shipped_policy_and_flow_checkpoint_load_from_their_new_homes() -> None:
    """The files that ship with the package keep loading after the rooms moved."""
    from flow_predictor.checkpoint import SHIPPED_CHECKPOINT, load_predictor
    from mara_agents.policy.inference import load_policy
    from mara_agents.policy.policy_file import SHIPPED_POLICY

    assert SHIPPED_POLICY.is_file() and SHIPPED_POLICY.parent.name == "shipped"
    policy = load_policy()
    assert policy.net.layout.num_slots == 64 and policy.wrapper == "flow+deadline"
    assert load_predictor(SHIPPED_CHECKPOINT).noise.shape[0] > 0
