"""What each room may import: ``flow_predictor`` predicts and never plans (no scheduler
code: nothing of ``mara_env.schedulers`` or ``mara_agents``); in ``mara_agents``,
evaluation, baselines and planning neither torch nor ray, the policy runtime no ray;
training and live mode's worker pool are the only places that bring ray (live's trainers
and workers need torch only, its job files, journal and cluster book-keeping neither).

Each room's every module is imported in a fresh interpreter; the modules it must not load
are then looked for in ``sys.modules`` (as ``tests/env/test_env.py`` guards ``mara_env``).
"""

from __future__ import annotations

import ast
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
    "mara_agents.planning": ("torch", "ray"),
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
    assert rooms == {
        "policy",
        "training",
        "evaluation",
        "baselines",
        "planning",
        "live",
        "commands",
    }


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


# what the predictor's room must never import: scheduler code
NOT_IN_PREDICTOR = ("mara_agents", "mara_env.schedulers")


def _imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at its top or inside a function."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return names


def _banned(name: str) -> bool:
    return any(name == b or name.startswith(b + ".") for b in NOT_IN_PREDICTOR)


def test_the_predictor_imports_no_scheduler_code() -> None:
    """flow_predictor predicts; planners live in mara_agents.planning: no module of it
    names mara_agents or mara_env.schedulers, and importing them all loads no mara_agents
    (mara_env's own env loads its schedulers module for the slot order: not ours to ban)."""
    files = sorted((ROOT / "flow_predictor").glob("*.py"))
    named = {f.name: sorted(n for n in _imported(f) if _banned(n)) for f in files}
    assert not {f: n for f, n in named.items() if n}, named
    modules = [
        "flow_predictor",
        *(f"flow_predictor.{f.stem}" for f in files if f.stem != "__init__"),
    ]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"bad = sorted(m for m in sys.modules if any(m == b or m.startswith(b + '.') "
        f"for b in {NOT_IN_PREDICTOR[:1]!r}))\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, f"flow_predictor loads scheduler code: {proc.stderr[-2000:]}"


def test_the_shipped_policy_and_flow_checkpoint_load_from_their_new_homes() -> None:
    """The files that ship with the package keep loading after the rooms moved."""
    from flow_predictor.checkpoint import SHIPPED_CHECKPOINT, load_predictor
    from mara_agents.policy.inference import load_policy
    from mara_agents.policy.policy_file import SHIPPED_POLICY

    assert SHIPPED_POLICY.is_file() and SHIPPED_POLICY.parent.name == "shipped"
    policy = load_policy()
    assert policy.net.layout.num_slots == 64 and policy.wrapper == "flow+deadline"
    assert load_predictor(SHIPPED_CHECKPOINT).noise.shape[0] > 0
