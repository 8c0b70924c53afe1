"""What each room may import: ``flow_predictor`` predicts and never plans (no scheduler
code: nothing of ``mara_env.schedulers`` or ``mara_agents``); in ``mara_agents``,
evaluation, baselines and planning neither torch nor ray, the policy runtime no ray;
training and live mode's worker pool are the only places that bring ray (live's trainers
and workers need torch only, its job files, journal and cluster book-keeping neither).

Each room's every module is imported in a fresh interpreter; the modules it must not load
are then looked for in ``sys.modules`` (as ``tests/env/test_env.py`` guards ``mara_env``).
Every import statement of every module, inside functions too, is read from its source and
checked against the rooms table of ``docs/architecture.md`` (its "may import" column is
what this test allows), and the modules of ``mara_agents`` import one another without a
cycle.
"""

from __future__ import annotations

import ast
import pkgutil
import re
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
    assert policy.net.layout.num_slots == 64 and policy.wrapper == "cluster"
    assert load_predictor(SHIPPED_CHECKPOINT).noise.shape[0] > 0


# What the rooms table's "may import" column can name (besides the rooms themselves), and
# the imports of a module that are checked against it: the rooms of mara_agents, the other
# packages of this repository, and the heavy libraries a room is built to keep out.
PACKAGES = ("mara_env", "flow_predictor", "mara_traces", "torch", "ray", "tensorboard")
DOC = ROOT / "docs" / "architecture.md"


def _room_of(module: str) -> str | None:
    """The room (or top-level module) of ``mara_agents`` a dotted name lies in, or the
    checked package it names, else None (the standard library, numpy, ...)."""
    parts = module.split(".")
    if parts[0] == "mara_agents":
        return parts[1] if len(parts) > 1 else None
    return parts[0] if parts[0] in PACKAGES else None


def _rooms_table() -> dict[str, set[str] | None]:
    """Each room of the table in ``docs/architecture.md`` and what it may import (None:
    anything); "everything above" is every room and import of the rows above it."""
    text = DOC.read_text()
    section = text.split("## The rooms of `mara_agents`")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    allowed: dict[str, set[str] | None] = {}
    above: set[str] = set()
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        rooms = {Path(m.rstrip("/")).stem for m in re.findall(r"`([^`]+)`", cells[0])}
        may = cells[2]
        named = set(re.findall(r"`([\w.]+)`", may)) | set(re.findall(r"\b(torch|ray)\b", may))
        if "any room" in may:
            for room in rooms:
                allowed[room] = None
            continue
        if "everything above" in may:
            named |= above
        for room in rooms:
            allowed[room] = {_room_of(f"mara_agents.{n}") or n for n in named}
        above |= rooms | named
    return allowed


def _room_files() -> dict[str, list[Path]]:
    """The source files of each room and top-level module of ``mara_agents``."""
    files: dict[str, list[Path]] = {}
    for path in sorted((ROOT / "mara_agents").rglob("*.py")):
        parts = path.relative_to(ROOT / "mara_agents").with_suffix("").parts
        if parts == ("__init__",):
            continue
        files.setdefault(parts[0], []).append(path)
    return files


def test_the_rooms_table_names_every_room() -> None:
    assert set(_rooms_table()) == set(_room_files())


def test_every_import_of_a_room_is_one_the_rooms_table_allows() -> None:
    """Imports inside functions count: a lazy import is still an arrow between rooms."""
    table = _rooms_table()
    wrong = {}
    for room, paths in _room_files().items():
        if table[room] is None:
            continue
        for path in paths:
            rooms = {_room_of(name) for name in _imported(path)} - {None, room}
            bad = sorted(rooms - table[room])
            if bad:
                wrong[str(path.relative_to(ROOT))] = bad
    assert not wrong, f"imports the rooms table of {DOC.name} does not allow: {wrong}"


def _module_graph() -> dict[str, set[str]]:
    """Which modules of ``mara_agents`` each imports (inside functions too): a name
    resolves to the longest module it starts with (a package is its ``__init__``)."""
    modules = {}
    for path in (ROOT / "mara_agents").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text())
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names |= {f"{node.module}.{a.name}" for a in node.names}
        graph[module] = {resolve(n) for n in names} - {None, module}
    return graph


def test_no_import_cycle_among_the_modules_of_mara_agents() -> None:
    graph = _module_graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            cycle = visit(module)
            assert cycle is None, " -> ".join(cycle)
