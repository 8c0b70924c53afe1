"""The bare install: ``pip install mara-sched`` (no extras) in a fresh venv.

It must bring no torch and no ray, run ``mara simulate`` and ``mara evaluate`` on the
torch-free baselines, and stop every command that needs an extra with one line naming
it.  Installing into a new venv takes about a minute, so those tests are marked slow; CI
runs them after the suite (``.ci/run``).  The first test is the quick guard that runs
with the suite: those commands import neither torch nor ray.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# what a fresh clone does not have (outputs, caches, the dev venv)
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "runs", "results", "build", "dist", "*.egg-info", "__pycache__", ".*cache"
)


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bin/ of a fresh venv with the package installed without extras."""
    tmp = tmp_path_factory.mktemp("bare")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=NOT_SOURCE)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(src)]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return venv / "bin"


def mara(bare: Path, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(bare / "mara"), *argv], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_bare_commands_import_neither_torch_nor_ray(tmp_path):
    argv = ["evaluate", "--schedulers", "lara,optimus,flow_share:predictor=wls,oracle"]
    argv += ["--episodes", "1", "--loads", "1.0", "--horizon", "10", "--workers", "1"]
    argv += ["--no-progress", "--out", str(tmp_path)]
    code = (
        "import sys; from mara_agents.cli import main; "
        "assert main(['simulate', '--episodes', '1', '--horizon', '10']) == 0; "
        f"assert main({argv!r}) == 0; "
        "bad = [m for m in ('torch', 'ray') if m in sys.modules]; assert not bad, bad"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def _extras_in_setup_cfg() -> dict[str, set[str]]:
    """extra -> normalised distribution names it installs (self-references followed)."""
    import configparser
    import re

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    raw = {
        extra: [re.split(r"[\[<>=!~; ]", r.strip())[0].lower() for r in value.split("\n")]
        for extra, value in cfg["options.extras_require"].items()
    }
    own = {
        extra: re.findall(r"mara-sched\[([^\]]+)\]", value)
        for extra, value in cfg["options.extras_require"].items()
    }

    def dists(extra: str) -> set[str]:
        names = {n.replace("_", "-") for n in raw[extra] if n and n != "mara-sched"}
        for ref in own[extra]:
            for sub in ref.split(","):
                names |= dists(sub.strip())
        return names

    return {extra: dists(extra) for extra in raw}


def test_extras_named_by_the_cli_match_setup_cfg():
    from importlib.metadata import packages_distributions

    from mara_agents.extras import EXTRAS

    declared = _extras_in_setup_cfg()
    provided_by = packages_distributions()
    for extra, modules in EXTRAS.items():
        for module in modules:
            dists = {d.lower().replace("_", "-") for d in provided_by.get(module, [])}
            assert dists & declared[extra], f"setup.cfg's [{extra}] installs no {module}"
    assert "torch" in declared["rllib"] and "ray" in declared["rllib"]
    assert declared["all"] >= declared["predictor"] | declared["collect"] | declared["rllib"]


@pytest.mark.slow
def test_bare_install_has_neither_torch_nor_ray(bare):
    code = "import importlib.util as u; print([m for m in ('torch', 'ray') if u.find_spec(m)])"
    out = subprocess.run([str(bare / "python"), "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr


@pytest.mark.slow
def test_bare_install_simulates_and_evaluates(bare, tmp_path):
    sim = mara(bare, "simulate", "--scheduler", "lara", "--episodes", "2", "--horizon", "30")
    assert sim.returncode == 0, sim.stderr
    assert "mean ± 95% CI" in sim.stdout and "nan" not in sim.stdout
    specs = "lara,edf,uniform,least_slack,random,oracle,optimus,flow_share:predictor=wls"
    argv = ["--episodes", "1", "--loads", "1.0", "--horizon", "20", "--workers", "2"]
    ev = mara(bare, "evaluate", "--schedulers", specs, *argv, "--out", str(tmp_path / "ev"))
    assert ev.returncode == 0, ev.stderr
    assert (tmp_path / "ev" / "results.csv").is_file()


@pytest.mark.slow
@pytest.mark.parametrize(
    "command, extra",
    [
        ("predictor evaluate --out pe", "predictor"),
        ("evaluate --schedulers lara,mara --episodes 1 --out ev", "predictor"),
        ("evaluate --schedulers lara,flow_share --episodes 1 --out ev", "predictor"),
        ("evaluate --schedulers lara --address auto --out ev", "rllib"),
        ("reproduce --out r", "predictor"),
        ("traces collect --family tabular --n 1 --out t.parquet", "collect"),
        ("train mara.yaml", "rllib"),
        ("export checkpoint --out p.pt", "rllib"),
    ],
)
def test_command_needing_an_extra_names_it_in_one_line(bare, tmp_path, command, extra):
    done = mara(bare, *command.split(), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().endswith(f"pip install 'mara-sched[{extra}]'"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert list(tmp_path.iterdir()) == []  # stopped before any work: nothing written
