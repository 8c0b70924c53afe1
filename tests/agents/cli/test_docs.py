"""Every file, folder and module the user docs name exists, and the figures and names they
quote where that is cheap (slot and node counts, the env id, the shipped files) are the
code's, so a rename or a new default cannot leave them stale."""

from __future__ import annotations

import argparse
import ast
import functools
import inspect
import itertools
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCS = sorted(
    [ROOT / "README.md", ROOT / "benchmarks" / "README.md", ROOT / "examples" / "README.md"]
    + list((ROOT / "docs").glob("*.md"))
)
PACKAGES = ("mara_env", "flow_predictor", "mara_agents", "mara_traces")
TOP = (*PACKAGES, "experiments", "benchmarks", "examples", "tests", "docs")
# A repository path as docs write it: `mara_agents/training/train.py`, `experiments/`, `a/{b,c}.py`.
PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(TOP)})/[\w./{{}},*-]*)")
# A dotted name in backticks or quotes: `mara_env.cluster_env.raw_env`, "pkg.mod:function".
DOTTED = re.compile(rf"[`\"']((?:{'|'.join(PACKAGES)})(?:[.:]\w+)+)")
# An import in a code example: from pkg.mod import name
IMPORT = re.compile(rf"from ((?:{'|'.join(PACKAGES)})(?:\.\w+)*) import (\w+)")
LINK = re.compile(r"\]\(([^)#\s]+)")


def _expand(path: str) -> list[str]:
    """``a/{b,c}.py`` -> ``[a/b.py, a/c.py]``."""
    parts = re.split(r"\{([^}]*)\}", path)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def _exists(path: str) -> bool:
    path = path.rstrip(".,;:")
    return any(any(ROOT.glob(p)) if "*" in p else (ROOT / p).exists() for p in _expand(path))


def _defined(module: Path, name: str) -> str | None:
    """How ``module`` (a .py file or package) defines ``name`` at top level: ``"module"``,
    ``"class"``, ``"name"`` (function, assignment or import), or None."""
    if module.is_dir():
        if (module / f"{name}.py").exists() or (module / name).is_dir():
            return "module"
        module = module / "__init__.py"
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return "class"
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return "name"
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return "name"
            lazy = node.value if isinstance(node.value, ast.Dict) else None  # lazy exports
            if lazy and any(isinstance(k, ast.Constant) and k.value == name for k in lazy.keys):
                return "name"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return "name"
    return None


def _resolves(dotted: str) -> bool:
    """``pkg.mod.attr`` (or ``pkg.mod:attr``, ``pkg.mod.Class.method``): the module exists
    and defines the attribute; only a class may be followed by a further name."""
    names = re.split(r"[.:]", dotted)
    path = ROOT / names[0]
    rest = names[1:]
    while rest and _defined(path, rest[0]) == "module":
        path = path / rest[0] if (path / rest[0]).is_dir() else path / f"{rest[0]}.py"
        rest = rest[1:]
    if not rest:
        return True
    kind = _defined(path, rest[0])
    return kind == "class" or (kind is not None and len(rest) == 1)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_paths_and_modules_exist(doc: Path) -> None:
    text = doc.read_text()
    missing = [p for p in PATH.findall(text) if not _exists(p)]
    dotted = DOTTED.findall(text) + [f"{m}.{n}" for m, n in IMPORT.findall(text)]
    missing += [d for d in dotted if not _resolves(d)]
    missing += [
        link
        for link in LINK.findall(text)
        if "://" not in link and not (doc.parent / link).resolve().exists()
    ]
    assert not missing, f"{doc.relative_to(ROOT)} names what does not exist: {missing}"


def _quoted(doc: str, pattern: str) -> list:
    """Every match of ``pattern`` in ``doc`` (a path under the repository), by its groups;
    a claim the docs no longer make fails here, so the table below stays in step."""
    found = re.findall(pattern, (ROOT / doc).read_text())
    assert found, f"{doc} no longer quotes {pattern!r}: update the claims in {Path(__file__).name}"
    return found


def _everywhere(pattern: str) -> list[str]:
    """Every match of ``pattern`` in the user docs."""
    return [m for doc in DOCS for m in re.findall(pattern, doc.read_text())]


def test_quoted_ids_sample_counts_and_file_names_are_the_codes():
    """The env id, the wrapper's flow sample count and the shipped files' names, as the
    docs write them, are the ones the code defines."""
    from flow_predictor.remaining import FLOW_SAMPLES
    from mara_env import ENV_ID, V2_ID

    ids = _everywhere(r"mara/ComputeCluster-v\d+")
    assert ids and set(ids) <= {ENV_ID, V2_ID} and ENV_ID in ids  # v2: still registered
    samples = _quoted("docs/predictor.md", r"flow predictor in the wrapper uses (\d+) samples")
    assert [int(s) for s in samples] == [FLOW_SAMPLES]
    # read from the modules' source: the loaders themselves need torch
    for module, constant, folder in [
        ("mara_agents/policy/policy_file.py", "SHIPPED_POLICY", "mara_agents/policy/shipped"),
        ("flow_predictor/checkpoint.py", "SHIPPED_CHECKPOINT", "flow_predictor/checkpoints"),
    ]:
        name = re.search(rf'{constant} = .*"(\w+\.pt)"', (ROOT / module).read_text()).group(1)
        quoted = _everywhere(rf"{folder}/(\w+\.pt)")
        # the shipped file is quoted; any other quoted there (a recipe's earlier stage) exists
        assert name in quoted, (constant, quoted)
        assert all((ROOT / folder / q).is_file() for q in quoted), (constant, quoted)


def test_quoted_slot_and_node_counts_are_the_shipped_policys_and_the_experiments():
    """K and N as the docs quote them: the shipped policy's layout and env, which are its
    recipe's last stage's; the first stages' K, which is experiments/mara.yaml's."""
    torch = pytest.importorskip("torch")
    import yaml

    from mara_agents.policy.policy_file import SHIPPED_POLICY
    from mara_agents.reproduce import DAGGER_RECIPES
    from mara_agents.training.experiment import load_experiment

    header = torch.load(SHIPPED_POLICY, map_location="cpu", weights_only=True)
    last = load_experiment(DAGGER_RECIPES[-1]).env
    slots, nodes = header["layout"]["num_slots"], header["env"]["num_nodes"]
    assert (last.num_slots, last.num_nodes) == (slots, nodes)
    pairs = _quoted("docs/architecture.md", r"K = (\d+) slots for N = (\d+) nodes")
    pairs += _quoted("docs/training.md", r"\*(\d+) slots for (\d+) nodes\.\*")
    assert {(int(k), int(n)) for k, n in pairs} == {(slots, nodes)}
    counts = _quoted("docs/results.md", r"The policy sees (\d+) task slots")
    counts += _quoted("docs/reproduce.md", r"(\d+) slots\)")
    assert {int(k) for k in counts} == {slots}
    first = yaml.safe_load((ROOT / "experiments" / "mara.yaml").read_text())["env"]
    counts = _quoted("docs/training.md", r"(\d+) visible slots")
    counts += _quoted("docs/training.md", r"`mara\.yaml` \|[^|\n]*?(\d+) slots")
    assert {int(k) for k in counts} == {first["num_slots"]} and first["num_nodes"] == nodes


# A command line as docs write it: inline code, or a code block's lines (continued by "\").
CODE_SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)
MARA_COMMAND = re.compile(r"(?<![\w/.-])mara ([a-z][\w-]*)((?: [a-z][\w-]*)?)(.*)")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
# A spec's knobs as docs write them: hedge:confidence=0.05:miss_cost=cluster
SPEC = re.compile(r"(?<![\w.=/-])([a-z_]+)((?::[a-z_]+=[^:\s,`'\")|]*)+)")


def _command_lines(text: str) -> list[str]:
    """Every ``mara COMMAND ...`` line of a doc's code: spans and code blocks."""
    lines = CODE_SPAN.findall(FENCE.sub("", text))
    for block in FENCE.findall(text):
        lines += block.replace("\\\n", " ").splitlines()
    return [line for line in lines if "mara " in line]


def _options(parser: argparse.ArgumentParser) -> tuple[set[str], dict[str, Any]]:
    """The option strings of ``parser`` and its sub-commands' parsers by name."""
    options, subs = set(), {}
    for action in parser._actions:
        options |= {o for o in action.option_strings if o.startswith("--")}
        if isinstance(action, argparse._SubParsersAction):
            subs = dict(action.choices)
    return options, subs


@functools.cache
def _command_options(command: str, sub: str) -> set[str] | None:
    """The options ``mara COMMAND [SUB]`` takes (None: no such command)."""
    from mara_agents.cli import COMMANDS, build_parser

    if command not in COMMANDS:
        return None
    _, commands = _options(build_parser([command]))
    options, subs = _options(commands[command])
    if sub in subs:
        options |= _options(subs[sub])[0]
    return options | {"--help"}


def test_every_option_a_doc_names_for_a_command_exists() -> None:
    """``--option`` in a ``mara COMMAND ...`` line of any doc is an option of that command
    (of its sub-command, where it has them), as its parser defines it."""
    missing = []
    for doc in DOCS:
        for line in _command_lines(doc.read_text()):
            for match in MARA_COMMAND.finditer(line):
                command, sub, rest = match.group(1), match.group(2).strip(), match.group(3)
                known = _command_options(command, sub)
                if known is None:
                    continue  # "mara live" in prose, a policy named mara, ...
                rest = rest.split(" mara ")[0]
                missing += [
                    f"{doc.name}: mara {command} {opt}"
                    for opt in OPTION.findall(rest)
                    if opt not in known
                ]
    assert not missing, missing


def _spec_keys(name: str) -> set[str] | None:
    """The ``key=`` a built-in scheduler's spec takes (None: not a scheduler)."""
    from dataclasses import fields

    from mara_agents.baselines import ALL_SCHEDULERS
    from mara_agents.baselines.hedge import Hedge
    from mara_agents.planning.hedge_rule import HedgeParams

    if name not in ALL_SCHEDULERS:
        return None
    keys = set()
    for cls in (ALL_SCHEDULERS[name], *((Hedge,) if name == "lookahead" else ())):
        params = inspect.signature(cls).parameters.values()
        keys |= {p.name for p in params if p.kind is not p.VAR_KEYWORD}
        if any(p.kind is p.VAR_KEYWORD for p in params):
            keys |= {f.name for f in fields(HedgeParams)}
    return keys


def test_every_knob_a_doc_names_in_a_spec_exists() -> None:
    """``key=`` in a ``NAME:key=value`` spec of a built-in scheduler is one of its knobs."""
    unknown = []
    for doc in DOCS:
        for name, params in SPEC.findall(doc.read_text()):
            keys = _spec_keys(name)
            if keys is None:
                continue
            named = [p.partition("=")[0] for p in params.strip(":").split(":")]
            unknown += [f"{doc.name}: {name}:{k}=" for k in named if k not in keys]
    assert not unknown, unknown
