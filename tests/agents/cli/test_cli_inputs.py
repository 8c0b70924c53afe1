"""Bad command-line input is stopped at the door: one line naming the culprit and what
was expected, exit status 2, before any work starts and with nothing written."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mara_agents.cli import main
from mara_agents.extras import EXTRAS, MissingExtra, as_missing_extra
from mara_env.schedulers import Scheduler

# somewhere no one can create a directory, root included
UNWRITABLE = "/proc/mara-no-such-dir/out"


def refused(argv: list[str], capsys: pytest.CaptureFixture, *culprit: str, status: int = 2) -> str:
    """Run ``mara ARGV``; assert exit ``status`` and one stderr line naming every ``culprit``."""
    assert main(argv) == status
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for word in culprit:
        assert word in err, err
    return err


EVALUATE = ["evaluate", "--schedulers", "uniform", "--loads", "1.0", "--episodes", "1"]
EVALUATE += ["--workers", "1", "--horizon", "10", "--no-progress"]


@pytest.mark.parametrize(
    ("args", "culprit"),
    [
        (["--episodes", "0"], ["--episodes 0", "[1, 1000000]"]),
        (["--episodes", "-5"], ["--episodes -5", "[1, 1000000]"]),
        (["--loads", ""], ["--loads ''", "empty"]),
        (["--loads", ","], ["--loads ','", "empty"]),
        (["--loads", "1,,2"], ["--loads '1,,2'", "an empty item"]),
        (["--loads", "1.0,"], ["--loads '1.0,'", "an empty item"]),
        (["--seeds", ",0"], ["--seeds ',0'", "an empty item"]),
        (["--schedulers", ""], ["--schedulers ''", "empty"]),
        (["--loads", "inf"], ["--loads", "load=inf", "(0, 100]"]),
        (["--loads", "-1"], ["--loads", "load=-1.0", "(0, 100]"]),
        (["--loads", "nan"], ["--loads", "load=nan", "(0, 100]"]),
        (["--loads", "heavy"], ["--loads", "'heavy'", "load factors"]),
        (["--loads", "1.0,1.5,1"], ["--loads", "'1' is given twice"]),
        (["--schedulers", "lara,edf,lara"], ["--schedulers", "'lara' is given twice"]),
        (["--schedulers", "lara:margin=abc"], ["'lara:margin=abc'", "margin='abc'", "float"]),
        (["--schedulers", "optimus:refit_every=2.5"], ["refit_every='2.5'", "expected int"]),
        (
            ["--schedulers", "lara:marg=1"],
            ["unknown parameter 'marg'", "known: discount, ridge, explore_reports, margin"],
        ),
        (["--schedulers", "oracle:margin=1"], ["'margin'", "Oracle takes no parameters"]),
        (["--schedulers", "mara,mara="], ["--schedulers", "'mara=' names the same", "'mara'"]),
        (["--reference", "edf"], ["--reference", "'edf'", "--schedulers ['uniform']"]),
        (["--seeds", "-1"], ["--seeds", "'-1'", "non-negative integer"]),
        (["--seeds", "0,0"], ["--seeds", "'0' is given twice"]),
        (["--workers", "0"], ["--workers 0", "[1, 1024]"]),
        (["--traces", "no_such_lib.parquet"], ["no_such_lib.parquet", "no such trace file"]),
        (["--split", "holdout"], ["split='holdout'", "'test'"]),
    ],
)
def test_evaluate_refuses_bad_values(tmp_path, capsys, args, culprit):
    out = tmp_path / "out"
    refused([*EVALUATE, *args, "--out", str(out)], capsys, *culprit)
    assert not out.exists()


def test_evaluate_refuses_an_out_that_is_not_a_writable_directory(tmp_path, capsys):
    afile = tmp_path / "results.csv"
    afile.write_text("keep me")
    refused([*EVALUATE, "--out", str(afile)], capsys, f"--out {afile}: is a file", "directory")
    below = afile / "sub"
    refused([*EVALUATE, "--out", str(below)], capsys, f"--out {below}: {afile} is a file")
    refused([*EVALUATE, "--out", UNWRITABLE], capsys, f"--out {UNWRITABLE}: cannot write")
    assert afile.read_text() == "keep me"
    assert [p.name for p in tmp_path.iterdir()] == ["results.csv"]


def test_evaluate_pairs_against_the_reference(tmp_path, capsys):
    out = tmp_path / "out"
    argv = [*EVALUATE, "--schedulers", "edf,uniform", "--episodes", "3", "--out", str(out)]
    assert main([*argv, "--reference", "uniform"]) == 0
    summary = (out / "summary.md").read_text()
    assert "## Paired difference vs uniform" in summary and "| edf | " in summary
    assert "| uniform | " not in summary.split("## Paired difference vs uniform")[1].split("##")[0]
    assert main([*argv, "--force"]) == 0  # lara (the default) not evaluated: the first
    assert "## Paired difference vs edf" in (out / "summary.md").read_text()


def test_evaluate_runs_into_a_new_nested_out(tmp_path, capsys):
    out = tmp_path / "a" / "b"
    assert main([*EVALUATE, "--out", str(out)]) == 0
    assert (out / "results.csv").is_file()
    assert len(pd.read_csv(out / "results.csv")) == 1


SIMULATE = ["simulate", "--scheduler", "uniform", "--horizon", "10"]


@pytest.mark.parametrize(
    ("args", "culprit"),
    [
        (["--episodes", "-5"], ["--episodes -5", "[1, 1000000]"]),
        (["--episodes", "0"], ["--episodes 0", "[1, 1000000]"]),
        (["--load", "inf"], ["--load inf", "(0, 100]"]),
        (["--load", "0"], ["--load 0.0", "(0, 100]"]),
        (["--seed", "-1"], ["--seed -1", "[0, 4294967295]"]),
        (["--scheduler", "lara:explore_reports"], ["'lara:explore_reports'", "key=value"]),
    ],
)
def test_simulate_refuses_bad_values(capsys, args, culprit):
    refused([*SIMULATE, *args], capsys, *culprit)


def test_simulate_prints_no_nan_for_one_episode(capsys):
    assert main([*SIMULATE, "--episodes", "1"]) == 0
    assert "nan" not in capsys.readouterr().out


def _flat_library(path, loss):
    n = 20
    df = pd.DataFrame(
        {"trace_id": "a", "family": "x", "source": "s", "step": np.arange(1.0, n + 1), "loss": loss}
    )
    df["split"] = "test"
    df.to_parquet(path, index=False)
    return path


def test_predictor_evaluate_refuses_zero_samples(tmp_path, capsys):
    out = tmp_path / "pe"
    argv = ["predictor", "evaluate", "--split", "test", "--samples", "0", "--out", str(out)]
    refused(argv, capsys, "--samples 0", "[1, 65536]")
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "culprit"),
    [
        (["--epochs", "0"], "--epochs 0: expected at least 1, or --prior-curves > 0"),
        (["--prior-curves", "-1"], "--prior-curves -1: expected an integer in [0, 10000000]"),
        (["--prior-epochs", "0"], "--prior-epochs 0: expected an integer in [1, 1000000]"),
        (["--prior-lr", "0"], "--prior-lr 0.0: expected a number in (0, 10]"),
        (["--batch-size", "0"], "--batch-size 0: expected an integer in [1, 1000000]"),
        (["--prefixes-per-trace", "0"], "--prefixes-per-trace 0: expected an integer in [1, 1000"),
        (["--hidden", "0"], "--hidden 0: expected an integer in [1, 65536]"),
        (["--synthetic", "-1"], "--synthetic -1: expected an integer in [0, 10000000]"),
        (["--lr", "nan"], "--lr nan: expected a number in (0, 10]"),
        (["--lr", "-1"], "--lr -1.0: expected a number in (0, 10]"),
        (["--sim-like", "2"], "--sim-like 2.0: expected a number in [0, 1]"),
        (["--max-minutes", "0"], "--max-minutes 0.0: expected a number in (0, 525600]"),
        (["--out", "{tmp}"], "--out {tmp}: expected a file path, not a directory"),
        (["--out", "{tmp}/f.txt/flow.pt"], "--out {tmp}/f.txt/flow.pt: {tmp}/f.txt is a file"),
        (["--out", UNWRITABLE + "/flow.pt"], f"--out {UNWRITABLE}/flow.pt: cannot write"),
    ],
)
def test_predictor_train_refuses_bad_values(tmp_path, capsys, args, culprit):
    (tmp_path / "f.txt").write_text("")
    args = [a.format(tmp=tmp_path) for a in args]
    argv = ["predictor", "train", "--out", str(tmp_path / "run" / "flow.pt"), *args]
    refused(argv, capsys, culprit.format(tmp=tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


@pytest.mark.parametrize(
    "junk",
    [
        b"not a checkpoint\n",  # text
        pickle.dumps({1}, protocol=4),  # a pickle torch's weights-only loader refuses
        b"PK\x03\x04garbage",  # a broken zip, as a truncated torch file starts
    ],
    ids=["text", "pickle", "zip"],
)
def test_predictor_evaluate_says_in_one_line_that_a_file_is_no_flow_checkpoint(
    tmp_path, capsys, junk
):
    pytest.importorskip("torch")
    path = tmp_path / "junk.pt"
    path.write_bytes(junk)
    out = tmp_path / "pe"
    argv = ["predictor", "evaluate", "--checkpoint", str(path), "--out", str(out)]
    refused(argv, capsys, str(path), "not a flow-predictor checkpoint")
    assert not out.exists()


def test_predictor_evaluate_explains_a_library_with_nothing_to_predict(tmp_path, capsys):
    lib = _flat_library(tmp_path / "flat.parquet", 0.5)  # written directly: import refuses it
    out = tmp_path / "pe"
    argv = ["predictor", "evaluate", "--traces", str(lib), "--samples", "2", "--out", str(out)]
    refused(argv, capsys, str(lib), "no remaining work to predict", status=1)
    assert not out.exists()


@pytest.mark.parametrize("loss", [0.5, 0.0])
def test_traces_import_refuses_a_flat_curve(tmp_path, capsys, loss):
    src = _flat_library(tmp_path / "flat.parquet", loss)
    lib = tmp_path / "lib.parquet"
    argv = ["traces", "import", str(src), "--out", str(lib)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "never falls below its first value" in err
    assert not lib.exists()


def test_traces_import_refuses_a_directory_as_out(tmp_path, capsys):
    src = tmp_path / "in.csv"
    pd.DataFrame({"trace_id": ["a"]}).to_csv(src, index=False)
    assert main(["traces", "import", str(src), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{tmp_path}: is a directory" in err and "TensorBoard" not in err


def test_a_missing_extra_is_named_in_one_line(tmp_path, capsys, monkeypatch):
    # the bare install lacks torch (tests/test_bare_install.py does it for real); here the
    # predictor extra is made to need a module that no install has
    monkeypatch.setitem(EXTRAS, "predictor", ("mara_no_such_module",))
    out = tmp_path / "pe"
    argv = ["predictor", "evaluate", "--out", str(out)]
    refused(argv, capsys, "mara predictor: needs mara_no_such_module", "'mara-sched[predictor]'")
    assert not out.exists()


def test_missing_modules_map_to_their_extra():
    assert as_missing_extra(ModuleNotFoundError("x", name="ray.rllib")).extra == "rllib"
    assert as_missing_extra(ModuleNotFoundError("x", name="torch")).extra == "predictor"
    assert as_missing_extra(ModuleNotFoundError("x", name="sklearn.datasets")).extra == "collect"
    assert as_missing_extra(ModuleNotFoundError("x", name="gymnasium")) is None
    assert as_missing_extra(ImportError("x")) is None
    missing = MissingExtra("torch", "predictor")
    assert as_missing_extra(missing) is missing


@pytest.mark.parametrize(
    ("args", "culprit"),
    [
        (["--n", "3"], "--n and --stream need --family"),
        (["--family", "rl"], "--n is required"),
        (["--family", "lm", "--n", "1", "--stream", "v2"], "--stream 'v2' for lm"),
        (["--family", "rl", "--n", "0"], "--n"),
        (["--ship", "lib.csv"], "--ship lib.csv: expected a .parquet"),
    ],
)
def test_traces_collect_refuses_bad_values(tmp_path, capsys, args, culprit):
    out = tmp_path / "lib.parquet"
    assert main(["traces", "collect", "--out", str(out), *args]) == 2
    assert culprit in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "culprit"),
    [
        (["--episodes", "0"], "--episodes"),
        (["--loads", ""], "--loads"),
        (["--loads", "1.0,inf"], "load=inf"),
        (["--loads", "1.0,1.0"], "given twice"),
        (["--seeds", "-1"], "--seeds"),
        (["--schedulers", "lara,lara"], "given twice"),
        (["--workers", "0"], "--workers"),
        (["--jobs", "no_such_jobs.parquet"], "--jobs no_such_jobs.parquet"),
        (["--jobs", "philly", "--jobs-nodes", "0"], "--jobs-nodes"),
        (["--jobs-episodes", "0"], "--jobs-episodes"),
        (["--schedulers", "lara,nope"], "unknown scheduler 'nope'"),
        (["--schedulers", "lara:margin=x"], "margin='x'"),
        (["--loads", "1,,2"], "an empty item"),
    ],
)
def test_reproduce_refuses_bad_values_before_any_work(tmp_path, capsys, args, culprit):
    out = tmp_path / "results"
    assert main(["reproduce", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert culprit in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_training_checks_its_out_with_the_cli_probe(tmp_path):
    """``check_out`` (training) and ``--out`` (the CLI) give one answer: the probe's, which
    also refuses where ``os.access`` says yes (root, /proc)."""
    from mara_agents.commands.checks import UsageError, check_output_dir
    from mara_agents.training.records import check_out
    from mara_env.config import ConfigError

    afile = tmp_path / "f"
    afile.write_text("")
    for bad in (afile, afile / "sub", UNWRITABLE):
        with pytest.raises(UsageError) as cli:
            check_output_dir(bad)
        with pytest.raises(ConfigError) as training:
            check_out(bad)
        assert str(cli.value).split(": ", 1)[1] == str(training.value).split(": ", 1)[1]
    with pytest.raises(ConfigError, match=r"out='/proc/mara-no-such-dir/out': cannot write"):
        check_out(UNWRITABLE)
    assert check_out(tmp_path / "new" / "runs") == tmp_path / "new" / "runs"
    assert not (tmp_path / "new").exists()


def test_export_refuses_a_missing_checkpoint_and_an_unwritable_out(tmp_path, capsys):
    pytest.importorskip("ray")
    out = tmp_path / "policy.pt"
    missing = tmp_path / "no_such_checkpoint"
    refused(["export", str(missing), "--out", str(out)], capsys, f"CHECKPOINT {missing}", "no such")
    ckpt = tmp_path / "checkpoint_000001"
    ckpt.mkdir()
    refused(["export", str(ckpt), "--out", f"{UNWRITABLE}/p.pt"], capsys, "--out", "cannot write")
    refused(["export", str(ckpt), "--out", str(tmp_path)], capsys, "--out", "not a directory")
    refused(["export", str(ckpt), "--out", str(out)], capsys, str(ckpt), "no RLlib checkpoint")
    state = tmp_path / "mara_pretrain.pt"
    state.write_bytes(b"")
    refused(["export", str(state), "--out", str(out)], capsys, str(state), "needs --experiment")
    assert not out.exists()


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("flow_predictor/checkpoints/flow_v3.pt", "is a 'mara-flow-predictor' file"),
        ("mara_agents/policy/shipped/mara_v19.pt", "is a policy file already"),
        ("experiments/mara.yaml", "not a torch state dict"),
    ],
)
def test_export_of_a_file_of_another_kind_says_what_it_is(tmp_path, capsys, path, kind):
    pytest.importorskip("ray")
    root = Path(__file__).resolve().parents[3]
    out = tmp_path / "x.pt"
    argv = ["export", str(root / path), "--experiment", str(root / "experiments" / "mara.yaml")]
    refused([*argv, "--out", str(out)], capsys, path, kind)
    assert not out.exists()


def test_export_refuses_to_replace_a_policy_file_without_force(tmp_path, capsys):
    pytest.importorskip("ray")
    out = tmp_path / "policy.pt"
    out.write_bytes(b"an earlier export")
    ckpt = tmp_path / "checkpoint_000001"
    ckpt.mkdir()
    refused(["export", str(ckpt), "--out", str(out)], capsys, f"--out {out}: exists", "--force")
    assert out.read_bytes() == b"an earlier export"


class Knobs(Scheduler):
    """A scheduler of one's own, with the annotations a spec's values are checked against."""

    def __init__(self, on: bool = False, label: str = "", rate: float | None = None) -> None:
        self.on, self.label, self.rate = on, label, rate

    def allocate(self, sim):
        return np.zeros(len(sim.status), np.int64)


def test_scheduler_spec_values_take_their_annotated_types():
    from mara_agents.evaluation.registry import SpecError, make_scheduler

    knobs = make_scheduler("tests.agents.cli.test_cli_inputs.Knobs:on=true:label=7:rate=2")
    assert (knobs.on, knobs.label, knobs.rate) == (True, "7", 2)
    with pytest.raises(SpecError, match=r"on='yes'; expected bool$"):
        make_scheduler("tests.agents.cli.test_cli_inputs.Knobs:on=yes")
    with pytest.raises(SpecError, match=r"rate='fast'; expected float$"):
        make_scheduler("tests.agents.cli.test_cli_inputs.Knobs:rate=fast")
    assert make_scheduler("lara:margin=0").work.margin == 0


def test_only_plain_mara_is_an_alias():
    from mara_agents.evaluation.registry import expand_alias

    assert expand_alias("mara") == "mara="  # the shipped policy
    assert [expand_alias(s) for s in ("mara=p.pt", "lara", "env=lara")] == [
        "mara=p.pt",
        "lara",
        "env=lara",
    ]


@pytest.mark.parametrize("verbose", ["9", "-1"])
def test_train_refuses_a_verbosity_tune_does_not_have(tmp_path, capsys, verbose):
    pytest.importorskip("ray")
    smoke = Path(__file__).resolve().parents[3] / "experiments" / "mara_smoke.yaml"
    argv = ["train", str(smoke), "--out", str(tmp_path / "runs"), "--verbose", verbose]
    refused(argv, capsys, f"--verbose {verbose}", "[0, 3]")
    assert list(tmp_path.iterdir()) == []


def test_predictor_train_and_lofo_never_replace_earlier_results_silently(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("flow.pt", "flow.last.pt"):
        target = run / name
        target.write_bytes(b"an earlier checkpoint")
        argv = ["predictor", "train", "--out", str(run / "flow.pt"), "--epochs", "1"]
        culprit = f"--out {target}: exists; choose a new name, --resume to continue it, or --force"
        refused(argv, capsys, culprit)
        assert target.read_bytes() == b"an earlier checkpoint"
        target.unlink()
    lofo = tmp_path / "lofo"
    lofo.mkdir()
    (lofo / "lofo.csv").write_text("earlier\n")
    argv = ["predictor", "lofo", "--out", str(lofo), "--epochs", "1"]
    refused(argv, capsys, f"--out {lofo}: not empty")
    assert (lofo / "lofo.csv").read_text() == "earlier\n"


@pytest.mark.parametrize(
    ("files", "culprit"),
    [
        ({"module_state.pkl": pickle.dumps({})}, "no class_and_ctor_args.pkl beside"),
        ({"class_and_ctor_args.pkl": pickle.dumps({})}, "no module_state.pkl beside"),
        (
            {"class_and_ctor_args.pkl": b"junk", "module_state.pkl": b"junk"},
            "class_and_ctor_args.pkl: not readable",
        ),
        (
            {"class_and_ctor_args.pkl": pickle.dumps([1, 2]), "module_state.pkl": b""},
            "class_and_ctor_args.pkl: not readable",
        ),
        (
            {
                "class_and_ctor_args.pkl": pickle.dumps(
                    {"ctor_args_and_kwargs": ((), {"observation_space": None})}
                ),
                "module_state.pkl": b"\x80\x04",
            },
            "class_and_ctor_args.pkl: not readable",
        ),
    ],
)
def test_export_of_a_broken_checkpoint_names_the_file_in_one_line(tmp_path, capsys, files, culprit):
    pytest.importorskip("ray")
    ckpt = tmp_path / "checkpoint_000001"
    ckpt.mkdir()
    for name, data in files.items():
        (ckpt / name).write_bytes(data)
    out = tmp_path / "policy.pt"
    refused(["export", str(ckpt), "--out", str(out)], capsys, culprit)
    assert not out.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs", "info", "philly"],
        ["traces", "info"],
        ["simulate", "--scheduler", "uniform", "--episodes", "1", "--horizon", "10"],
        ["--help"],
        ["evaluate", "--help"],
    ],
)
def test_a_closed_stdout_ends_a_command_quietly_with_status_0(argv):
    """As ``mara jobs info | head -1`` does: the reader goes before the command prints."""
    code = "import sys; from mara_agents.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert err == ""


@pytest.mark.parametrize(
    ("argv", "culprit"),
    [
        (
            ["deadline-prior", "--episodes", "1", "--loads", "1,,2", "--out", "{tmp}/p.json"],
            "--loads",
        ),
        (["deadline-prior", "--episodes", "1", "--out", "{tmp}/exists.json"], "--force"),
        (["train", "--out", "{tmp}"], "--out"),
        (["evaluate", "--checkpoint", "{tmp}/nope.pt", "--out", "{tmp}/e"], "nope.pt"),
        (["lofo", "--exclude-families", "a", "--out", "{tmp}/l"], "--exclude-families"),
    ],
)
def test_predictor_usage_errors_exit_2_as_documented(tmp_path, capsys, argv, culprit):
    pytest.importorskip("torch")
    (tmp_path / "exists.json").write_text("{}")
    argv = ["predictor", *(a.format(tmp=tmp_path) for a in argv)]
    refused(argv, capsys, culprit)


@pytest.mark.parametrize("spec", ["hedge:predictor=deadline", "hedge:prior=workload"])
@pytest.mark.parametrize("command", ["simulate", "evaluate"])
def test_a_history_without_a_train_split_is_named_before_any_tuning(
    tmp_path, capsys, command, spec
):
    from mara_env.traces import SHIPPED_LIBRARY

    library = tmp_path / "lib.parquet"
    traces = pd.read_parquet(SHIPPED_LIBRARY)
    traces[traces["split"] == "test"].to_parquet(library)
    argv = [command, "--traces", str(library), "--split", "all", "--horizon", "10"]
    if command == "simulate":
        argv += ["--scheduler", spec, "--episodes", "1"]
    else:
        argv += [*("--schedulers", spec, "--episodes", "1", "--workers", "1", "--no-progress")]
        argv += ["--loads", "1.0", "--out", str(tmp_path / "out")]
    err = refused(argv, capsys, "split='train'", "history", "drawn from the train split")
    assert "tuning" not in err


# a command reading each kind of input file, given junk: {junk} is a file of junk bytes,
# {empty} an empty folder
JUNK_READERS = {
    "trace library (traces info)": ["traces", "info", "{junk}.parquet"],
    "trace file (traces import)": ["traces", "import", "{junk}.csv", "--out", "{tmp}/l.parquet"],
    "job log (jobs import)": ["jobs", "import", "{junk}.csv", "--out", "{tmp}/j.parquet"],
    "jobs table (jobs info)": ["jobs", "info", "{junk}.parquet"],
    "jobs table (simulate)": ["simulate", "--jobs", "{junk}.parquet", "--episodes", "1"],
    "trace library (evaluate)": ["evaluate", "--traces", "{junk}.parquet", "--out", "{tmp}/o"],
    "cluster file (simulate)": ["simulate", "--cluster", "{junk}.yaml"],
    "live run (calibrate)": ["calibrate", "{empty}", "--out", "{tmp}/c.yaml"],
    "live job file (live)": ["live", "{junk}.yaml", "--out", "{tmp}/live"],
    "prior (simulate)": ["simulate", "--scheduler", "hedge:prior={junk}.json", "--episodes", "1"],
    "experiment (train)": ["train", "{junk}.yaml", "--out", "{tmp}/runs"],
    "trial (curves)": ["curves", "{empty}", "--out", "{tmp}/c.png"],
    "checkpoint (export)": ["export", "{empty}", "--out", "{tmp}/p.pt"],
}
NEEDS_RAY = ("live", "train", "curves", "export")


@pytest.mark.parametrize("kind", sorted(JUNK_READERS))
def test_every_reader_refuses_a_junk_file_in_one_line_with_status_2(tmp_path, capsys, kind):
    argv = JUNK_READERS[kind]
    if argv[0] in NEEDS_RAY:
        pytest.importorskip("ray")
    junk = tmp_path / "junk"
    for suffix in (".parquet", ".csv", ".yaml", ".json"):
        junk.with_suffix(suffix).write_bytes(b"\x00\xffjunk: [\n\x80")
    (tmp_path / "empty").mkdir()
    argv = [a.format(junk=junk, empty=tmp_path / "empty", tmp=tmp_path) for a in argv]
    refused(argv, capsys, "junk" if "{junk}" in " ".join(JUNK_READERS[kind]) else "empty")
