"""Every script of ``benchmarks/`` imports: each name it takes from the package still
exists (a function that moved once left ``benchmarks/scale.py`` failing at its first line).

The scripts are imported in one fresh interpreter under names other than ``__main__``, so
none of them runs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))

_IMPORT_ALL = """
import importlib.util, sys
failed = []
for path in sys.argv[1:]:
    name = "bench_" + path.rsplit("/", 1)[-1][:-3]
    spec = importlib.util.spec_from_file_location(name, path)
    sys.modules[name] = module = importlib.util.module_from_spec(spec)  # for dataclasses
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        failed.append(f"{path}: {type(e).__name__}: {e}")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def test_every_benchmark_imports():
    assert len(SCRIPTS) > 10
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL, *map(str, SCRIPTS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
