"""Job traces: import of each format, one-line errors that write nothing, the day split,
and replay as a workload source (deterministic per seed, thinned to the load)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mara_agents.cli import main
from mara_env.cluster import ClusterSim
from mara_env.config import ClusterConfig, ConfigError
from mara_env.engine import ClusterEngine
from mara_env.job_logs import JobsError, parse_map, read_job_log, read_jobs, write_jobs
from mara_env.replay import replay_day
from mara_env.traces import hash_split, load_traces
from mara_env.workload import sample_workload

PHILLY = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,4,11804.0,6214e9
2017-10-09 23:59:59,30.0,1,30.0,6214e9
2017-10-10 00:00:01,7200.0,8,57600.0,6214e9
2017-10-10 12:00:00,3600000.0,1,3600000.0,6214e9
"""
HELIOS = (
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,"
    "duration,queue\n"
    "1425511,uXBbc,vcJkd,1,1,1,COMPLETED,"
    "2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-10 04:55:09,36848,0\n"
    "1425512,uVMrF,vchbv,4,16,1,FAILED,"
    "2020-06-09 18:41:27,2020-06-09 18:41:27,2020-06-09 18:45:36,249,0\n"
    "1425513,uzqls,vcpDC,0,8,1,COMPLETED,"
    "2020-06-09 18:41:28,2020-06-09 18:41:28,2020-06-09 19:41:28,3600,0\n"
)
OWN = """id,queued,finished,n
a,100,1100,2
b,90000,90600,1
c,50,350,16
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_philly_csv_is_read_filtered_and_split_by_day(tmp_path):
    got = read_job_log(write(tmp_path, "philly.csv", PHILLY), "philly")
    t = got.table
    # the 30 s job is too short, the 1000-GPU-hour one too big (Pollux's filters)
    assert got.dropped == {"shorter_than_min_duration": 1, "gpu_hours_over_max": 1}
    assert t["job_id"].tolist() == ["1", "0", "3"]  # the log's rows, sorted by submission
    assert t["gpus"].tolist() == [4, 1, 8]
    assert t["submit_s"].tolist() == [6 * 3600 + 13 * 60 + 3, 7 * 3600 + 115, 86401]
    assert t["date"].tolist() == ["2017-10-09", "2017-10-09", "2017-10-10"]
    assert t["day"].tolist() == [0, 0, 1]
    assert t["split"].tolist() == [hash_split(d) for d in t["date"]]
    out = tmp_path / "jobs.parquet"
    write_jobs(t, out)
    back = read_jobs(out)
    pd.testing.assert_frame_equal(
        back[["job_id", "submit_s", "gpus"]], t[["job_id", "submit_s", "gpus"]]
    )


def test_philly_job_log_json(tmp_path):
    log = [
        {
            "status": "Pass",
            "jobid": "application_1",
            "user": "ce2f4c",
            "submitted_time": "2017-10-07 01:11:39",
            "attempts": [
                {
                    "start_time": "2017-10-07 01:12:09",
                    "end_time": "2017-10-07 01:13:23",
                    "detail": [{"ip": "m47", "gpus": ["gpu0", "gpu1"]}],
                },
                {
                    "start_time": "2017-10-07 01:13:30",
                    "end_time": "2017-10-07 02:13:30",
                    "detail": [{"ip": "m4", "gpus": ["gpu0"]}, {"ip": "m5", "gpus": ["gpu1"]}],
                },
            ],
        },
        {"jobid": "application_2", "submitted_time": "2017-10-07 03:00:00", "attempts": []},
    ]
    got = read_job_log(write(tmp_path, "log.json", json.dumps(log)), "philly")
    assert got.dropped == {"unfinished": 1}
    row = got.table.iloc[0]
    assert (row["job_id"], row["gpus"], row["duration_s"]) == ("application_1", 2, 74 + 3600)


def test_helios_cluster_log(tmp_path):
    got = read_job_log(write(tmp_path, "cluster_log.csv", HELIOS), "helios")
    assert got.dropped == {"cpu_only": 1}
    assert got.table["job_id"].tolist() == ["1425511", "1425512"]
    assert got.table["user"].tolist() == ["uXBbc", "uVMrF"]
    assert got.table["duration_s"].tolist() == [36848, 249]
    # an older copy without the duration column: start/end
    bare = "\n".join(",".join(r.split(",")[:10]) for r in HELIOS.splitlines())
    again = read_job_log(write(tmp_path, "bare.csv", bare), "helios")
    assert again.table["duration_s"].tolist() == [36848, 249]


def test_own_csv_through_a_map(tmp_path):
    got = read_job_log(
        write(tmp_path, "own.csv", OWN),
        "csv",
        parse_map("submit=queued,end=finished,gpus=n,job_id=id"),
    )
    t = got.table
    assert t["job_id"].tolist() == ["c", "a", "b"]
    assert t["submit_s"].tolist() == [0, 50, 89950]  # seconds since the first submission
    assert t["duration_s"].tolist() == [300, 1000, 600]
    assert t["date"].tolist() == ["day-0", "day-0", "day-1"]


# each format's submission column, as a log of two jobs submitted at the given times
TIMED = {
    "philly": ("timestamp,duration,num_gpus\n", "{t},600,1\n", []),
    "helios": (
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,duration\n",
        "1,u,v,1,1,1,COMPLETED,{t},600\n",
        [],
    ),
    "csv": ("q,d,n\n", "{t},600,1\n", ["--format", "csv", "--map", "submit=q,duration=d,gpus=n"]),
}


@pytest.mark.parametrize("fmt", sorted(TIMED))
def test_timezone_offsets_are_compared_in_utc_or_refused_when_some_lack_one(tmp_path, capsys, fmt):
    head, row, extra = TIMED[fmt]
    summer, winter = "2017-10-28 23:30:00+02:00", "2017-10-29 23:30:00+01:00"  # 25 h apart
    log = write(tmp_path, "log.csv", head + row.format(t=summer) + row.format(t=winter))
    out = tmp_path / "out.parquet"
    args = [*(["--format", fmt] if fmt != "csv" else []), *extra]
    assert main(["jobs", "import", str(log), "--out", str(out), *args]) == 0
    assert np.diff(read_jobs(out)["submit_s"]).tolist() == [25 * 3600]
    out.unlink()
    log.write_text(head + row.format(t=summer) + row.format(t="2017-10-29 23:30:00"))
    capsys.readouterr()
    refused(["jobs", "import", str(log), "--out", str(out), *args], capsys, "row 1", "offset")
    assert not out.exists()


def refused(argv: list[str], capsys: pytest.CaptureFixture, *culprit: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for word in culprit:
        assert word in err, err


BAD = [
    ("timestamp,duration\n2017-10-09 07:01:55,66\n", [], ["missing column", "num_gpus"]),
    ("timestamp,duration,num_gpus\n2017-10-09 07:01:55,,1\n", [], ["row 0", "duration", "(empty)"]),
    ("timestamp,duration,num_gpus\n2017-10-09 07:01:55,nan,1\n", [], ["row 0", "finite number"]),
    ("timestamp,duration,num_gpus\n2017-10-09 07:01:55,-5,1\n", [], ["row 0", "-5", "negative"]),
    ("timestamp,duration,num_gpus\n2017-10-09 07:01:55,90,-1\n", [], ["num_gpus -1", "whole"]),
    ("timestamp,duration,num_gpus\n2017-10-09 07:01:55,90,0\n", [], ["num_gpus 0", ">= 1 GPU"]),
    ("timestamp,duration,num_gpus\n2017-10-09 07:01:55,90,1.5\n", [], ["num_gpus 1.5"]),
    (
        "timestamp,duration,num_gpus\n2017-10-09,90,1\nyesterday,90,1\n",
        [],
        ["row 1", "'yesterday'"],
    ),
    ("", [], ["is empty"]),
    ("timestamp,duration,num_gpus\n", [], ["no jobs"]),
    ("t,e,n\n5,1,2\n", ["--format", "csv", "--map", "submit=t,end=e,gpus=n"], ["row 0", "before"]),
    ("t,d,n\n5,100,2\n", ["--format", "csv", "--map", "submit=t,gpus=n"], ["--map", "duration"]),
    ("t,d,n\n5,100,2\n", ["--format", "csv", "--map", "submit=t,d,gpus=n"], ["'d' is not ROLE"]),
    ("t,d,n\n5,100,2\n", ["--format", "csv", "--map", "submit=t,dur=d,gpus=n"], ["role 'dur'"]),
    (
        "t,d,n\n5,100,2\n",
        ["--format", "csv", "--map", "submit=t,duration=d,end=d,gpus=n"],
        ["exactly one"],
    ),
    (
        "t,d,n\n5,100,2\n",
        ["--format", "csv", "--map", "submit=t,duration=x,gpus=n"],
        ["missing column", "'x'"],
    ),
    ("t,d,n\n5,100,2\n", ["--format", "csv"], ["--map"]),
    ("t,d,n\n5,100,2\n", ["--map", "submit=t,duration=d,gpus=n"], ["--map"]),
    # values a jobs table cannot hold: refused with the log's own value, never wrapped or inf
    (
        "timestamp,duration,num_gpus\n0,61,65537\n",
        ["--max-gpu-hours", "inf"],
        ["row 0", "num_gpus 65537", "at most 32767"],
    ),
    (
        "timestamp,duration,num_gpus\n0,61,1\n10,1e39,1\n",
        ["--max-gpu-hours", "inf"],
        ["row 1", "duration 1e39", "longer"],
    ),
    ("timestamp,duration,num_gpus\n0,1e39,1\n", [], ["row 0", "duration 1e39"]),
    (
        "timestamp,duration,num_gpus\n0,100,1\n1e300,100,1\n5,100,1\n",
        [],
        ["row 1", "timestamp 1e300", "days from the log's other submissions"],
    ),
]


@pytest.mark.parametrize(("text", "extra", "culprit"), BAD)
def test_bad_logs_get_one_line_and_write_nothing(tmp_path, capsys, text, extra, culprit):
    log = write(tmp_path, "log.csv", text)
    out = tmp_path / "out.parquet"
    refused(["jobs", "import", str(log), "--out", str(out), *extra], capsys, *culprit)
    assert list(tmp_path.iterdir()) == [log]


def test_missing_file_and_unknown_format(tmp_path, capsys):
    out = tmp_path / "out.parquet"
    refused(["jobs", "import", str(tmp_path / "no.csv"), "--out", str(out)], capsys, "no such")
    with pytest.raises(JobsError, match="unknown format 'slurm'"):
        read_job_log(write(tmp_path, "log.csv", PHILLY), "slurm")
    assert not out.exists()


def test_import_and_info_commands(tmp_path, capsys):
    out = tmp_path / "jobs.parquet"
    assert main(["jobs", "import", str(write(tmp_path, "p.csv", PHILLY)), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "3 jobs over 2 days" in printed and "GPUs: 1: 33.3 %" in printed
    assert main(["jobs", "info", "--nodes", "64"]) == 0
    assert "implied load on 64 nodes" in capsys.readouterr().out


def test_days_split_stably_and_disjointly():
    table = read_jobs("philly")
    per_day = table.groupby("date")["split"].nunique()
    assert (per_day == 1).all()  # a day lies wholly in one split
    days = table.drop_duplicates("date").set_index("date")["split"]
    assert all(days[d] == hash_split(d) for d in days.index)  # by its date alone
    assert set(days) == {"train", "val", "test"}


def _digest(wl) -> str:
    """The workload's fields, floats to 9 significant digits: numpy picks its kernels by
    CPU (its AVX-512 exp and log, for one, differ from the others in the last bit), and so
    do the floats drawn through them; the same code gives the same digest on either."""
    h = hashlib.sha256()
    for f in ("arrival", "deadline", "target", "trace", "cap", "alpha", "rate", "size"):
        x = np.ascontiguousarray(getattr(wl, f))
        if x.dtype.kind == "f":
            h.update(",".join(f"{v:.9g}" for v in x.tolist()).encode())
        else:
            h.update(x.tobytes())
    return h.hexdigest()[:16]


def test_synthetic_episodes_are_unchanged():
    # digests of episodes drawn before job traces could be replayed (commit 5b16f8b gives
    # the same ones; env v3 keeps them under env v2's deadline model)
    traces = load_traces(split="test")
    config = ClusterConfig(split="test", deadline_model="unbiased")
    for seed, digest in ((0, "45ea144a3ebafd60"), (1, "e2499b9811484bd8")):
        wl = sample_workload(config, traces, np.random.default_rng(seed))
        assert _digest(wl) == digest


REPLAY = ClusterConfig(jobs="philly", split="test", num_nodes=16, load=1.0)


def test_replay_is_one_day_per_seed_the_same_for_everyone():
    traces = load_traces(split="test")
    a = sample_workload(REPLAY, traces, np.random.default_rng(5))
    b = sample_workload(REPLAY, traces, np.random.default_rng(5))
    assert _digest(a) == _digest(b)
    assert _digest(a) != _digest(sample_workload(REPLAY, traces, np.random.default_rng(6)))
    sim = ClusterSim(REPLAY, traces)
    sim.reset(np.random.default_rng(5))
    engine = ClusterEngine(REPLAY, traces)
    engine.reset(5)
    assert _digest(sim.workload) == _digest(engine.sim.workload) == _digest(a)
    # the episode names the day it replays (the harness clusters intervals by it)
    assert a.day == replay_day(REPLAY, np.random.default_rng(5)).date
    assert sim.metrics()["day"] == a.day
    synthetic = sample_workload(REPLAY.replace(jobs=None), traces, np.random.default_rng(5))
    assert synthetic.day is None
    assert (np.diff(a.arrival) >= 0).all() and a.arrival.max() < REPLAY.horizon
    assert (a.deadline > a.arrival).all()
    np.testing.assert_array_equal(a.cap, np.minimum(2 * a.ref, 16))
    assert set(np.unique(a.ref)) <= {1, 2, 4, 8, 16}


@pytest.mark.parametrize(("nodes", "load"), [(16, 1.0), (16, 2.0), (64, 2.0)])
def test_thinning_reaches_the_asked_load(nodes, load):
    config = REPLAY.replace(num_nodes=nodes, load=load)
    implied = [replay_day(config, np.random.default_rng(s)).implied_load for s in range(12)]
    assert np.mean(implied) == pytest.approx(load, rel=0.02)
    assert min(implied) >= 0.85 * load


def test_deadlines_of_the_trace_are_kept(tmp_path):
    text = "t,d,n,dl\n" + "".join(f"{60 * i},{720 * 3},1,{60 * i + 7200}\n" for i in range(200))
    got = read_job_log(
        write(tmp_path, "own.csv", text), "csv", parse_map("submit=t,duration=d,gpus=n,deadline=dl")
    )
    path = tmp_path / "jobs.parquet"
    write_jobs(got.table, path)
    config = ClusterConfig(jobs=str(path), split="all", num_nodes=4, load=0.5)
    wl = sample_workload(config, load_traces(split="train"), np.random.default_rng(0))
    np.testing.assert_array_equal(wl.deadline - wl.arrival, 10)  # 2 h of 12-minute ticks
    np.testing.assert_array_equal(wl.size, 3.0)


def test_config_refuses_bad_jobs_settings(tmp_path):
    for bad, field in (
        (dict(jobs="x.csv"), "jobs"),
        (dict(jobs=str(tmp_path / "none.parquet")), "jobs"),
        (dict(jobs_hours=(9, 9)), "jobs_hours"),
        (dict(jobs_cap_multiple=0.5), "jobs_cap_multiple"),
        (dict(jobs_size_range=(0.5, 10)), "jobs_size_range"),
    ):
        with pytest.raises(ConfigError, match=field):
            ClusterConfig(**bad)
    with pytest.raises(JobsError, match="no test day carries load 2"):
        replay_day(REPLAY.replace(num_nodes=256, load=2.0), np.random.default_rng(0))


def test_experiment_env_takes_jobs():
    from mara_agents.training.experiment import parse_experiment

    exp = parse_experiment({"name": "t", "env": {"jobs": "philly", "jobs_cap_multiple": 3}})
    assert exp.env.jobs == "philly" and exp.env.jobs_cap_multiple == 3


def test_evaluate_replays_philly_at_64_nodes(tmp_path, capsys):
    out = tmp_path / "eval"
    argv = ["evaluate", "--jobs", "philly", "--nodes", "64", "--split", "test", "--loads", "1.0"]
    argv += ["--schedulers", "uniform,lara", "--episodes", "2", "--workers", "1"]
    assert main([*argv, "--no-progress", "--out", str(out)]) == 0
    assert "replaying philly (test split)" in capsys.readouterr().out
    df = pd.read_csv(out / "results.csv")
    assert len(df) == 4 and (df["tasks"] > 50).all()
    assert df["day"].notna().all()  # each episode names its day
    assert "(days: ±" in (out / "summary.md").read_text()
    refused([*argv[:-4], "--nodes", "256", "--loads", "2.0", "--out", str(out)], capsys, "--jobs")


def test_envs_replay_days():
    from pettingzoo.test import api_test, parallel_api_test

    from mara_env.cluster_env import env, parallel_env

    small = dict(jobs="philly", num_nodes=8, num_slots=4, horizon=30, split="val")
    api_test(env(**small), num_cycles=200)
    parallel_api_test(parallel_env(**small), num_cycles=200)


def test_train_takes_a_job_trace_and_names_a_bad_one(tmp_path, capsys):
    from tests.agents.training.test_train import smoke_yaml

    smoke = str(smoke_yaml(tmp_path))
    out = str(tmp_path / "runs")
    assert main(["train", smoke, "--jobs", str(tmp_path / "nope.parquet"), "--out", out]) == 2
    assert "jobs=" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
