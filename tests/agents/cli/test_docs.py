"""Every file, folder and module the user docs name exists, and the figures and names they
quote where that is cheap (slot and node counts, the env id, the shipped files) are the
code's, so a rename or a new default cannot leave them stale."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

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
