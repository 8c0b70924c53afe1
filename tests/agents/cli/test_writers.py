"""Every command that writes a file follows one rule (mara_agents.outputs): an existing
file is refused unless --force (a trace library is extended, keeping every column), a
lock keeps a second command out, and nothing is left beside the file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mara_agents.cli import main
from mara_agents.outputs import OutputError, claim_file
from tests.agents.cli.test_outputs import refused


def _trial(folder: Path) -> Path:
    folder.mkdir(parents=True)
    rows = [{"training_iteration": i, "time_total_s": 10.0 * i} for i in range(1, 4)]
    (folder / "result.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


# each writing command, with the file it writes as {out} (its other inputs need not be
# valid: the output is checked first, or after checks these pass)
WRITERS = {
    "jobs import": ["jobs", "import", "{tmp}/log.csv", "--out", "{out}"],
    "curves": ["curves", "a={tmp}/trial", "--out", "{out}", "--csv", "{tmp}/points.csv"],
    "curves --csv": ["curves", "a={tmp}/trial", "--out", "{tmp}/plot.png", "--csv", "{out}"],
    "calibrate": ["calibrate", "{tmp}/live", "--out", "{out}"],
    "export": ["export", "{tmp}/checkpoint", "--out", "{out}"],
    "predictor deadline-prior": [
        *("predictor", "deadline-prior", "--jobs", "none", "--loads", "1"),
        *("--episodes", "1", "--out", "{out}"),
    ],
}
SUFFIX = {"jobs import": ".parquet", "curves": ".png", "curves --csv": ".csv"}


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_every_writer_refuses_an_existing_file_without_force(tmp_path, capsys, command):
    if command in ("curves", "curves --csv", "export"):
        pytest.importorskip("ray")
    if command == "predictor deadline-prior":
        pytest.importorskip("torch")
    _trial(tmp_path / "trial")
    (tmp_path / "checkpoint").mkdir()
    out = tmp_path / ("kept" + SUFFIX.get(command, ".yaml"))
    out.write_text("an earlier result")
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = [a.format(tmp=tmp_path, out=out) for a in WRITERS[command]]
    option = "--csv" if command == "curves --csv" else "--out"
    refused(argv, capsys, f"{option} {out}: exists", "--force")
    assert out.read_text() == "an earlier result"
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no lock, no temporary


def test_jobs_import_replaces_a_table_only_with_force(tmp_path, capsys):
    log = tmp_path / "log.csv"
    log.write_text("timestamp,duration,num_gpus\n" + "2017-10-09 07:01:55,600,1\n" * 5)
    out = tmp_path / "jobs.parquet"
    assert main(["jobs", "import", str(log), "--out", str(out)]) == 0
    table = out.read_bytes()
    refused(["jobs", "import", str(log), "--out", str(out)], capsys, "exists", "--force")
    assert out.read_bytes() == table
    assert main(["jobs", "import", str(log), "--out", str(out), "--force"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs.parquet", "log.csv"]


def _curves(tmp_path: Path, n: int = 12, **extra: object) -> Path:
    path = tmp_path / f"in{len(list(tmp_path.iterdir()))}.csv"
    step = np.arange(1.0, n + 1)
    pd.DataFrame(
        {"trace_id": path.stem, "family": "x", "source": "s", "step": step, "loss": 1 / step}
        | extra
    ).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_traces_import_extends_a_library_keeping_its_extra_columns(tmp_path, capsys, suffix):
    lib = tmp_path / f"lib{suffix}"
    assert (
        main(["traces", "import", str(_curves(tmp_path, lr=0.1, notes="mine")), "--out", str(lib)])
        == 0
    )
    assert main(["traces", "import", str(_curves(tmp_path)), "--out", str(lib)]) == 0
    df = pd.read_parquet(lib) if suffix == ".parquet" else pd.read_csv(lib)
    assert {"lr", "notes"} <= set(df.columns) and df["trace_id"].nunique() == 2
    assert df.loc[df["trace_id"] == "in0", "notes"].eq("mine").all()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_trace_csv_header_with_spaces_keeps_its_split(tmp_path, capsys):
    src = tmp_path / "spaced.csv"
    step = np.arange(1.0, 13)
    rows = [f"t, x, s, {s:g}, {1 / s:g}, test" for s in step]
    src.write_text("trace_id, family, source, step, loss, split\n" + "\n".join(rows) + "\n")
    lib = tmp_path / "lib.parquet"
    assert main(["traces", "import", str(src), "--out", str(lib)]) == 0
    assert set(pd.read_parquet(lib)["split"]) == {"test"}


def test_a_second_writer_of_the_same_file_stops_at_once(tmp_path):
    out = tmp_path / "c.yaml"
    with claim_file(out, command="calibrate"):
        with pytest.raises(OutputError, match="another run .* is writing there now"):
            claim_file(out, command="calibrate", force=True)
    assert list(tmp_path.iterdir()) == []  # the lock file went with the claim


def test_a_writer_makes_the_folder_its_file_goes_in(tmp_path):
    out = tmp_path / "runs" / "new" / "prior.json"
    with claim_file(out, command="predictor deadline-prior") as path:
        assert path == out and out.parent.is_dir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="is a file; expected a directory"):
        claim_file(tmp_path / "file" / "prior.json", command="predictor deadline-prior")


def test_curves_refuses_one_file_for_figure_and_points(tmp_path, capsys):
    pytest.importorskip("ray")
    trial = _trial(tmp_path / "trial")
    out = tmp_path / "c.png"
    argv = ["curves", str(trial), "--out", str(out), "--csv", str(out)]
    refused(argv, capsys, f"--csv {out}: the same file as --out")
    refused([*argv[:-1], str(tmp_path / "." / "c.png")], capsys, "the same file as --out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trial"]


@pytest.mark.parametrize("twice", [["x={a}", "x={b}"], ["x={a}", "y={a}"]])
def test_curves_refuses_a_label_or_a_run_given_twice(tmp_path, capsys, twice):
    pytest.importorskip("ray")
    a, b = _trial(tmp_path / "runA"), _trial(tmp_path / "runB")
    argv = ["curves", *(t.format(a=a, b=b) for t in twice), "--out", str(tmp_path / "c.png")]
    refused(argv, capsys, "give each run once")
    assert not (tmp_path / "c.png").exists()


def test_curves_says_in_one_line_that_a_result_json_is_half_written(tmp_path, capsys):
    pytest.importorskip("ray")
    trial = _trial(tmp_path / "trial")
    with open(trial / "result.json", "a") as f:
        f.write('{"training_iteration": 4, "time_to')
    refused(["curves", str(trial), "--out", str(tmp_path / "c.png")], capsys, "result.json")


@pytest.mark.parametrize(
    ("text", "culprit"),
    [
        ("", "no training iteration"),
        ("\n\n", "no training iteration"),
        ("[1, 2]\n", "line 1: list"),
        ("null\n", "line 1: NoneType"),
        ('{"training_iteration": 1}\n"text"\n', "line 2: str"),
        ('{"env_runners": {"mara": {"completion_rate": null}}}\n', "completion_rate is null"),
        ('{"env_runners": [1]}\n', "env_runners/mara/completion_rate: [1]"),
        ('{"time_total_s": "10 s"}\n', 'time_total_s is "10 s"'),
    ],
)
def test_curves_refuses_a_result_json_of_the_wrong_shape_in_one_line(
    tmp_path, capsys, text, culprit
):
    pytest.importorskip("ray")
    trial = tmp_path / "trial"
    trial.mkdir()
    (trial / "result.json").write_text(text)
    out = tmp_path / "c.png"
    refused(["curves", str(trial), "--out", str(out)], capsys, "result.json", culprit)
    assert not out.exists() and not out.with_suffix(".csv").exists()


def _policy(path: Path) -> None:
    from mara_agents.policy.inference import load_policy
    from mara_agents.policy.policy_file import save_policy

    save_policy(load_policy().net, path, {})


def _flow_checkpoint(path: Path) -> None:
    from flow_predictor.checkpoint import load_predictor, save_checkpoint

    p = load_predictor()
    save_checkpoint(path, p.net, p.norm)


@pytest.mark.parametrize("save", [_policy, _flow_checkpoint], ids=["policy", "flow checkpoint"])
def test_an_interrupted_torch_file_leaves_the_old_one_and_no_temporary(tmp_path, monkeypatch, save):
    torch = pytest.importorskip("torch")
    path = tmp_path / "file.pt"
    path.write_bytes(b"the earlier file")

    def half_then_ctrl_c(obj, f):
        f.write(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", half_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["file.pt"]
    assert path.read_bytes() == b"the earlier file"
    monkeypatch.undo()
    save(path)
    first = path.read_bytes()
    save(path)
    assert path.read_bytes() == first  # the same file, the same bytes
