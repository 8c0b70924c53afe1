"""Live mode on a private Ray: a real run, its outputs, the localhost binding, and faults.

Each run starts its own Ray on 127.0.0.1 and trains real (tiny) models: a few tens of
seconds each on 2 cores.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray")

from mara_agents.evaluation.stats import COLUMNS  # noqa: E402
from mara_env.traces import MIN_POINTS, validate_traces  # noqa: E402

MARA = str(Path(sys.executable).parent / "mara")
JOBS = """
defaults: {cap: 2, deadline: 7}
jobs:
  - {name: vision-a, trainer: vision, target: 0.5, arrival: 0}
  - {name: lm-a, trainer: lm, target: 2.3, arrival: 0}
  - {name: rl-a, trainer: rl, target: 0.3, arrival: 1}
  - {name: vision-b, trainer: vision, seed: 1, target: 0.45, arrival: 2}
"""

# easy targets (about 50 steps of each trainer) that a loaded machine still reaches in time
EASY = """
defaults: {cap: 2, deadline: 10}
jobs:
  - {name: vision-a, trainer: vision, target: 0.8, arrival: 0}
  - {name: lm-a, trainer: lm, target: 3.3, arrival: 0, eval_every: 5}
  - {name: rl-a, trainer: rl, target: 0.9, arrival: 1}
  - {name: vision-b, trainer: vision, seed: 1, target: 0.8, arrival: 2}
"""
EVERY = {"vision-a": 20, "lm-a": 5, "rl-a": 10, "vision-b": 20}  # EASY's, and the defaults'


@pytest.fixture(autouse=True)
def no_ray_left():
    if ray.is_initialized():  # an earlier test in this worker process left a Ray up
        ray.shutdown()
    yield
    if ray.is_initialized():
        ray.shutdown()


def _jobs(tmp_path: Path, text: str = JOBS) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(text)
    return path


def test_a_private_ray_refuses_strangers_and_has_no_dashboard(tmp_path, monkeypatch):
    from mara_agents.live.pool import NODE_RESOURCE, start_local_ray

    start_local_ray(3, num_cpus=1)
    try:
        assert ray.cluster_resources()[NODE_RESOURCE] == 3
        gcs = ray._private.worker.global_worker.node.address  # host:port others would dial
        import psutil

        ours = {p.pid for p in psutil.Process().children(recursive=True)}
        ports = {
            c.laddr.port
            for c in psutil.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and c.pid in ours
        }
        assert ports and 8265 not in ports  # no dashboard
        stranger = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
        stranger.update(HOME=str(tmp_path), RAY_AUTH_MODE="disabled")
        code = f"import ray; ray.init(address={gcs!r}, log_to_driver=False); print('IN')"
        r = subprocess.run(
            [sys.executable, "-c", code], env=stranger, capture_output=True, text=True, timeout=120
        )
        assert r.returncode != 0 and "IN" not in r.stdout
        assert "Authentication token is missing or incorrect" in r.stderr
    finally:
        ray.shutdown()
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with pytest.raises(RuntimeError, match="RAY_AUTH_MODE=disabled"):
        start_local_ray(1)


def test_the_shipped_policy_schedules_real_jobs(tmp_path):
    from mara_agents.live.run import run_live

    out = tmp_path / "live"
    df = run_live(_jobs(tmp_path, EASY), "mara", 3, 1.0, out, progress=False)
    assert list(df.columns[: len(COLUMNS)]) == list(COLUMNS)
    assert df.loc[0, "tasks"] == 4
    results = pd.read_csv(out / "results.csv")
    assert results.loc[0, "scheduler"] == "mara" and results.loc[0, "completed"] >= 1
    jobs = pd.read_csv(out / "jobs.csv")
    assert set(jobs["outcome"]) <= {"completed", "expired"}
    ran = jobs[jobs["steps"] > 0]
    assert len(ran) >= 3
    assert (ran["final_loss"] < ran["initial_loss"]).all()  # real training, real losses
    done = jobs[jobs["outcome"] == "completed"]
    assert (done["final_loss"] <= done["target"]).all()
    curves = pd.read_csv(out / "curves.csv")
    assert list(curves.columns) == ["trace_id", "family", "source", "step", "loss"]
    assert set(curves["trace_id"]) >= set(ran["job"])
    for name, c in curves.groupby("trace_id"):
        assert c["step"].iloc[0] == 0 and (c["step"].diff().dropna() > 0).all()
        assert (c["step"] % EVERY[name] == 0).all()  # it evaluated every eval_every steps
    for _, job in done.iterrows():  # and stopped at its first evaluation <= its target
        mine = curves[curves["trace_id"] == job["job"]]
        first = mine[mine["loss"] <= job["target"]].iloc[0]
        assert first["step"] == job["steps"] == mine["step"].max()
    long = curves.groupby("trace_id").filter(lambda c: len(c) >= MIN_POINTS)
    if len(long):  # what `mara traces import` takes (a curve of MIN_POINTS reports or more)
        validate_traces(long, "curves.csv")
    slices = pd.read_csv(out / "slices.csv")
    assert (slices["status"] == "ok").all()
    assert set(slices.loc[slices["passed"], "job"]) == set(done["job"])
    slices = slices[~slices["passed"]]  # those ran to the end of their tick
    # a slice fills its tick: set-up (building or restoring the job), training and
    # evaluation, until one more step (by its running estimate, which a loaded machine's
    # stalls inflate) would overrun the tick
    used = slices["setup_s"] + slices["train_s"] + slices["eval_s"]
    assert (used + slices["step_estimate_s"] > 0.97).all()
    assert (slices.loc[slices["slice_steps"] > 0, "step_estimate_s"] > 0).all()
    assert not slices.loc[~slices["fresh"], "built"].any()  # staying workers keep the job
    assert slices.loc[slices["fresh"] & (slices["slice_steps"] > 0), "built"].all()
    for name in ("summary.md", "gantt.png", "throughput.csv", "journal.jsonl"):
        assert (out / name).stat().st_size > 0
    assert list((out / "tb").glob("events.out.tfevents.*"))


@pytest.mark.parametrize(
    "trainer, step",
    [("Exploding", 20), ("ExplodingAtOnce", 1)],
    ids=["mid-run or in the probe", "in the probe"],
)
def test_a_job_that_raises_fails_alone(tmp_path, trainer, step):
    from mara_agents.live.run import run_live

    # a long deadline: on a loaded machine it reaches step 20 late, but it does reach it
    path = f"tests.live.live_trainers:{trainer}"
    text = JOBS.replace("trainer: rl,", f"trainer: '{path}', deadline: 40,")
    out = tmp_path / "live"
    run_live(_jobs(tmp_path, text), "uniform", 3, 1.0, out, progress=False)
    jobs = pd.read_csv(out / "jobs.csv").set_index("job")
    assert jobs.loc["rl-a", "outcome"] == "failed"
    assert f"loss is NaN at step {step}" in jobs.loc["rl-a", "error"]
    others = jobs.drop(index="rl-a")
    assert (others["outcome"] != "failed").all() and (others["steps"] > 0).all()


def _start(tmp_path: Path, out: Path, *extra: str) -> subprocess.Popen:
    args = [MARA, "live", str(_jobs(tmp_path)), "--scheduler", "uniform", "--nodes", "3"]
    args += ["--tick-seconds", "1", "--out", str(out), "--no-progress", *extra]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}  # its process records
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )


def _ticks(out: Path) -> int:
    path = out / "journal.jsonl"
    return max(0, len(path.read_text().splitlines()) - 1) if path.exists() else 0


def _wait_for_ticks(proc: subprocess.Popen, out: Path, n: int, limit: float = 90) -> None:
    t0 = time.monotonic()
    while _ticks(out) < n:
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() - t0 < limit, "no progress"
        time.sleep(0.1)


def test_a_worker_killed_mid_slice_loses_that_slice_only(tmp_path):
    out = tmp_path / "live"
    proc = _start(tmp_path, out)
    _wait_for_ticks(proc, out, 2)
    time.sleep(0.4)  # inside the third tick's slice
    pids = json.loads((out / "workers.json").read_text())["pids"]
    os.kill(pids[0], signal.SIGKILL)
    assert proc.wait(timeout=120) == 0, proc.stdout.read()
    slices = pd.read_csv(out / "slices.csv")
    lost = slices[slices["status"] == "lost"]
    assert len(lost) >= 1, slices
    job, tick = lost.iloc[0]["job"], lost.iloc[0]["tick"]
    mine = slices[(slices["job"] == job) & (slices["status"] == "ok")]
    before, after = mine[mine["tick"] < tick], mine[mine["tick"] > tick]
    if len(before) and len(after):  # it went on from its checkpoint, not from scratch
        assert after.iloc[0]["fresh"]
        assert after.iloc[0]["steps"] - after.iloc[0]["slice_steps"] == before.iloc[-1]["steps"]
    assert (out / "results.csv").exists()


def test_a_killed_driver_resumes_from_its_journal(tmp_path):
    out = tmp_path / "live"
    proc = _start(tmp_path, out)
    _wait_for_ticks(proc, out, 3)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    from mara_agents.live import processes

    (record,) = (tmp_path / "cache" / "mara" / "live-ray").glob("*.json")
    left = json.loads(record.read_text())["processes"]  # its Ray, started by the killed driver
    journalled = _ticks(out)
    assert not (out / "results.csv").exists()
    resumed = _start(tmp_path, out, "--resume")
    assert resumed.wait(timeout=120) == 0, resumed.stdout.read()
    records = [json.loads(x) for x in (out / "journal.jsonl").read_text().splitlines()]
    ticks = [r["t"] for r in records[1:]]
    assert ticks == list(range(len(ticks))) and len(ticks) >= journalled
    assert len(pd.read_csv(out / "results.csv")) == 1
    # none of the killed driver's Ray processes is left (the resumed run ended them)
    still = [p for p, started in left if (processes._stat(p) or (0, -1))[1] == started]
    assert left and not still
    slices = pd.read_csv(out / "slices.csv")
    for job, mine in slices[slices["status"] == "ok"].groupby("job"):
        steps = mine["steps"].to_numpy()
        # no job ran twice from scratch: each slice starts where the previous one ended
        assert (steps[1:] - mine["slice_steps"].to_numpy()[1:] == steps[:-1]).all(), job
