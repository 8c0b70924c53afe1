"""Every file, folder and module the user docs name exists, so a rename cannot leave them stale."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
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
