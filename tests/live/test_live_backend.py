"""The live backend without Ray: interface conformance with the simulator, job files, journal.

A pool that serves slices by the simulator's own rule (work += rate * n**alpha, the loss
from the task's trace) makes a :class:`LiveCluster` a twin of a :class:`ClusterSim`: the
same scheduler must then make the same decisions on both, tick for tick.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mara_agents.evaluation.registry import make_scheduler
from mara_agents.live.cluster import LiveCluster, Slice
from mara_agents.live.jobfile import JobFile, JobFileError, LiveJob, load_job_file
from mara_agents.live.journal import Journal, JournalError
from mara_env.cluster import ClusterSim
from mara_env.config import ClusterConfig
from mara_env.traces import load_traces
from mara_env.workload import reference_nodes, sample_workload


class SimPool:
    """Slices served by the simulator's rule on a given workload and trace set."""

    def __init__(self, workload, traces) -> None:
        self.wl, self.traces = workload, traces
        self.work = np.zeros(len(workload))
        self.calls: list[list[Slice]] = []

    def probe(self, specs):
        first = self.traces.loss[self.traces.offsets[self.wl.trace]]
        fam = self.traces.families[self.wl.trace]
        return [
            {"loss0": float(first[i]), "steps_per_s": 1.0, "family": str(fam[i])}
            for i in range(len(specs))
        ]

    def run(self, slices, seconds):
        self.calls.append(slices)
        out = {}
        for s in slices:
            k, n = s.task, len(s.nodes)
            gain = self.wl.rate[k] * n ** self.wl.alpha[k]
            self.work[k] += gain
            steps, loss = self.traces.trace(int(self.wl.trace[k]))
            j = max(0, np.searchsorted(steps, self.work[k], side="right") - 1)
            out[k] = {"status": "ok", "steps": self.work[k], "slice_steps": gain}
            out[k].update({"evals": [[float(steps[j]), float(loss[j])]], "state": b"x"})
            out[k].update({"passed": bool(self.work[k] >= self.wl.work_true[k]), "setup_s": 0.0})
        return out


def _twin(config, traces, seed):
    wl = sample_workload(config, traces, np.random.default_rng(seed))
    ref = reference_nodes(wl, config, np.arange(len(wl)))
    jobs = tuple(
        LiveJob(
            name=f"job{k}",
            trainer="tabular",
            target=float(wl.target[k]),
            arrival=int(wl.arrival[k]),
            deadline=int(wl.deadline[k]),
            cap=int(wl.cap[k]),
            gpus=int(ref[k]),
        )
        for k in range(len(wl))
    )
    live = LiveCluster(JobFile(Path("jobs.yaml"), jobs, 1.0, "-"), SimPool(wl, traces), 16, 1.0)
    live.resume(live.pool.probe(jobs), [])
    return wl, live


@pytest.mark.parametrize("spec", ["edf", "uniform", "fifo", "tiresias", "random"])
def test_a_scheduler_decides_alike_on_the_simulator_and_a_live_backend(spec):
    traces = load_traces(split="val")
    config = ClusterConfig(load=1.5, split="val", reassign_cost=False, horizon=40)
    for seed in (0, 1):
        wl, live = _twin(config, traces, seed)
        sim = ClusterSim(config, traces)
        sim.reset(np.random.default_rng(seed), workload=wl)
        live.reset()
        a, b = make_scheduler(spec), make_scheduler(spec)
        a.reset(sim, np.random.default_rng([seed, 1]))
        b.reset(live, np.random.default_rng([seed, 1]))
        while not sim.done:
            assign = a.assign(sim)
            np.testing.assert_array_equal(assign, b.assign(live))
            sim.tick(assign)
            live.tick(assign)
            np.testing.assert_allclose(live.work, sim.work)
            np.testing.assert_array_equal(live.reported, sim.reported)
        assert live.done
        m_sim, m_live = sim.metrics(), live.metrics()
        for key in ("completed", "expired", "reassignments", "utilisation", "ticks"):
            assert m_sim[key] == m_live[key], key


def test_a_live_backend_fits_throughput_from_steady_slices_only():
    traces = load_traces(split="val")
    config = ClusterConfig(load=1.0, split="val", reassign_cost=False, horizon=30)
    wl, live = _twin(config, traces, 3)
    live.reset()
    sched = make_scheduler("uniform")
    sched.reset(live, np.random.default_rng(0))
    while not live.done:
        live.tick(sched.assign(live))
    fresh = {s.task for call in live.pool.calls for s in call if s.fresh}
    counts: dict[int, set[int]] = {}
    for call in live.pool.calls:
        for s in call:
            if not s.fresh:
                counts.setdefault(s.task, set()).add(len(s.nodes))
    fitted = [k for k, ns in counts.items() if len(ns) >= 2]
    assert fitted and fresh
    np.testing.assert_allclose(live.workload.rate[fitted], wl.rate[fitted], rtol=1e-6)
    np.testing.assert_allclose(live.workload.alpha[fitted], wl.alpha[fitted], rtol=1e-6)


def test_the_oracle_cannot_see_a_live_jobs_work():
    traces = load_traces(split="val")
    _, live = _twin(ClusterConfig(split="val", horizon=20), traces, 0)
    live.reset()
    with pytest.raises(NotImplementedError, match="true remaining work"):
        live.remaining_true(np.array([0]))


# ---- job files -----------------------------------------------------------------------
GOOD = """
defaults: {cap: 2, deadline: 8}
jobs:
  - {name: a, trainer: lm, target: 2.0}
  - {name: b, trainer: vision, target: 0.4, arrival_s: 3.5, deadline_s: 10}
"""


def _write(tmp_path, text: str) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(text)
    return path


def test_a_job_file_turns_seconds_into_ticks(tmp_path):
    jf = load_job_file(_write(tmp_path, GOOD), tick_seconds=2.0, num_nodes=4)
    a, b = jf.jobs
    assert (a.name, a.arrival, a.deadline, a.cap) == ("a", 0, 8, 2)
    assert (b.arrival, b.deadline) == (2, 2 + 5)  # ceil(3.5 / 2), then 10 s = 5 ticks after


@pytest.mark.parametrize(
    "text, message",
    [
        ("jobs: []", "non-empty list"),
        ("jobz: []", r"unknown key\(s\) \['jobz'\]"),
        ("jobs: [{name: a, trainer: lm, target: 1, cap: 2}]", "missing key 'deadline'"),
        ("jobs: [{name: a, trainer: lm, target: 1, deadline: 3}]", "missing key 'cap'"),
        ("jobs: [{name: a, trainer: lm, target: 1, cap: 9, deadline: 3}]", r"cap=9.*\[1, 4\]"),
        ("jobs: [{name: a, trainer: lm, target: -1, cap: 1, deadline: 3}]", "target=-1"),
        ("jobs: [{name: a, trainer: lm, target: 1, cap: 1, gpus: 2, deadline: 3}]", "gpus=2"),
        ("jobs: [{name: a, trainer: lm, target: 1, cap: 1, deadline: 3, colour: red}]", "colour"),
        ("jobs: [{name: a, trainer: gpt5, target: 1, cap: 1, deadline: 3}]", "gpt5"),
        (
            "jobs: [{name: a, trainer: lm, target: 1, cap: 1, deadline: 3, params: {widht: 3}}]",
            "job 'a'.*widht",
        ),
        (
            "jobs: [{name: a, trainer: lm, target: 1, cap: 1, deadline: 3, deadline_s: 3}]",
            "not both",
        ),
        (
            "jobs: [{name: a, trainer: lm, target: 1, cap: 1, deadline: 3},"
            " {name: a, trainer: lm, target: 1, cap: 1, deadline: 3}]",
            "used twice",
        ),
        ("jobs: [{name: 'a b', trainer: lm, target: 1, cap: 1, deadline: 3}]", "name='a b'"),
        ("jobs: [{name: a, trainer: 'os:system', target: 1, cap: 1, deadline: 3}]", "os:system"),
        ("jobs: {a: 1", "not valid YAML"),
        # keys that are not names
        (
            "defaults: {1: 2}\njobs: [{name: a, trainer: lm, target: 1, cap: 1, deadline: 3}]",
            "defaults: key 1 is not a name",
        ),
        ("jobs: [{name: a, trainer: lm, target: 1, cap: 1, deadline: 3, 7: 1}]", "job 0: key 7"),
        ("jobs: [{name: a, trainer: lm, target: 1, cap: 1, deadline: 3, null: 1}]", "key None"),
        ("jobs: [{name: a, trainer: lm, target: 1, cap: 1, deadline: 3}]\n1: 2", r"key\(s\) \[1\]"),
        # a deadline shorter than a tick: not rounded up to a longer one
        (
            "jobs: [{name: a, trainer: lm, target: 1, cap: 1, deadline_s: 0.5}]",
            r"deadline_s=0.5: shorter than 1 tick\(s\) of --tick-seconds 1",
        ),
    ],
)
def test_a_bad_job_file_is_named_with_what_was_expected(tmp_path, text, message):
    with pytest.raises(JobFileError, match=message) as err:
        load_job_file(_write(tmp_path, text), tick_seconds=1.0, num_nodes=4)
    assert "jobs.yaml" in str(err.value) and "\n" not in str(err.value)


def test_a_missing_job_file_is_named(tmp_path):
    with pytest.raises(JobFileError, match="no such job file"):
        load_job_file(tmp_path / "nope.yaml", 1.0, 4)


def test_mara_live_rejects_bad_input_before_anything_is_written(tmp_path, capsys):
    from mara_agents.cli import main

    out = tmp_path / "out"
    bad = _write(tmp_path, "jobs: [{name: a, trainer: lm, target: 1, cap: 1}]")
    assert main(["live", str(bad), "--nodes", "2", "--out", str(out)]) == 2
    assert "missing key 'deadline'" in capsys.readouterr().err
    good = _write(tmp_path, GOOD)
    assert main(["live", str(good), "--scheduler", "bound", "--out", str(out)]) == 2
    assert "cannot run live" in capsys.readouterr().err
    assert main(["live", str(good), "--scheduler", "nope", "--out", str(out)]) == 2
    assert "unknown scheduler" in capsys.readouterr().err
    assert main(["live", str(good), "--resume", "--out", str(out)]) == 2
    assert "no journal to resume" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"scheduler": "oracle"}, "'oracle' cannot run live: LiveCluster does not know"),
        ({"scheduler": "lara:predictor=exact"}, "cannot run live"),
        ({"out": "a_file"}, "a_file: is a file; expected a directory"),
        ({"params": "{n: 10, batch: 100000}"}, "job 'b': .*batch=100000: expected an integer"),
    ],
)
def test_mara_live_refuses_before_ray_starts_and_leaves_nothing(tmp_path, capsys, change, message):
    import sys

    from mara_agents.cli import main

    (tmp_path / "a_file").write_text("mine")
    text = GOOD.replace("target: 0.4,", f"target: 0.4, params: {change.get('params', '{}')},")
    out = tmp_path / change.get("out", "out")
    args = ["live", str(_write(tmp_path, text)), "--out", str(out)]
    assert main([*args, "--scheduler", change.get("scheduler", "uniform")]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and len(err.strip().splitlines()) == 1, err
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "jobs.yaml"]
    assert (tmp_path / "a_file").read_text() == "mine"


def test_a_diverged_job_fails_at_once_and_frees_its_nodes():
    traces = load_traces(split="val")
    config = ClusterConfig(load=1.5, split="val", reassign_cost=False, horizon=20)
    _, live = _twin(config, traces, 2)
    serve = live.pool.run
    served, victim = [], []

    def run(slices, seconds):  # job 0 diverges in its third slice
        out = serve(slices, seconds)
        served.extend(s.task for s in slices if s.task == 0)
        if 0 in out and len(served) == 3:
            out[0] = {"status": "failed", "error": "DivergedError: training loss is nan"}
            victim.append(live.t)
        return out

    live.pool.run = run
    live.reset()
    sched = make_scheduler("uniform")
    sched.reset(live, np.random.default_rng(0))
    while not live.done:
        live.tick(sched.assign(live))
        if victim and live.t == victim[0] + 1:  # the tick in which it failed has ended
            assert live.failed[0] == "DivergedError: training loss is nan"
            assert not (live.node_task == 0).any() and live.nodes_now[0] == 0
    assert victim
    assert live.finish_tick[0] == victim[0] + 1
    others = live.node_ticks_used[1:]
    assert others.sum() > 0 and len(live.failed) == 1  # the others went on


# ---- the journal ---------------------------------------------------------------------
def test_a_torn_last_line_is_dropped_and_other_corruption_is_named(tmp_path):
    j = Journal(tmp_path)
    j.start({"nodes": 2})
    j.tick({"t": 0, "assign": [0, -1], "outcomes": {}})
    with open(j.path, "a") as f:
        f.write('{"kind": "tick", "t": 1, "ass')  # a crash mid-write
    start, ticks = j.read()
    assert start["nodes"] == 2 and [t["t"] for t in ticks] == [0]
    assert j.path.read_text().endswith("}\n")  # appends start on a clean line again
    with pytest.raises(JournalError, match="exists: pass --resume"):
        Journal(tmp_path).start({"nodes": 2})
    lines = j.path.read_text().splitlines()
    j.path.write_text("\n".join([lines[0], "garbage", lines[1]]) + "\n")
    with pytest.raises(JournalError, match="line 2 is not valid JSON"):
        j.read()
    j.path.write_text(json.dumps({"kind": "tick", "t": 0}) + "\n")
    with pytest.raises(JournalError, match="start record"):
        j.read()


def test_a_missing_checkpoint_is_named(tmp_path):
    j = Journal(tmp_path)
    rel = j.save_checkpoint("a", 3, b"blob")
    assert j.load_checkpoint(rel) == b"blob"
    j.prune("a", keep="checkpoints/a/t000004.pt")
    with pytest.raises(JournalError, match="t000003.pt: checkpoint named in the journal"):
        j.load_checkpoint(rel)


def test_a_live_job_spec_is_plain_data():
    job = LiveJob(name="a", trainer="lm", target=1.0, arrival=0, deadline=3, cap=1)
    assert json.loads(json.dumps(job.spec())) == job.spec()
    assert replace(job, seed=2).spec()["seed"] == 2


def test_a_resumed_run_replays_its_journal_and_decides_as_the_uninterrupted_one(tmp_path):
    traces = load_traces(split="val")
    config = ClusterConfig(load=1.5, split="val", reassign_cost=False, horizon=30)

    def run(journal, stop_at=None, resume=False):
        wl, live = _twin(config, traces, 5)
        live.journal = journal
        if resume:
            start, ticks = journal.read()
            live.resume(start["probes"], ticks)
            live.pool.work[:] = 0.0
            for record in ticks:  # the pool's jobs carry on from their checkpoints
                for k, v in record["outcomes"].items():
                    live.pool.work[int(k)] = v["steps"]
        elif journal is not None:
            journal.start({"probes": live._probes})
        live.reset()
        sched = make_scheduler("lara")
        sched.reset(live, np.random.default_rng(0))
        decisions = []
        while not live.done and (stop_at is None or live.t < stop_at):
            assign = sched.assign(live)
            decisions.append(assign.copy())
            live.tick(assign)
        return live, decisions

    whole, decided = run(None)
    journal = Journal(tmp_path)
    run(journal, stop_at=9)  # the driver dies after tick 9
    resumed, redecided = run(journal, resume=True)
    assert not resumed.diverged
    assert len(redecided) == len(decided)
    for a, b in zip(decided, redecided):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(resumed.workload.rate, whole.workload.rate)
    assert resumed.metrics() == whole.metrics()
    ticks = journal.read()[1]
    assert [r["t"] for r in ticks] == list(range(len(decided)))


# ---- no orphans ----------------------------------------------------------------------
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_a_killed_drivers_processes_are_ended_by_the_next_run(tmp_path, monkeypatch):
    import subprocess
    import sys

    from mara_agents.live import processes

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    # a "driver" that starts a child (its Ray, here a sleeper) and is then killed
    code = "import subprocess, time; subprocess.Popen(['sleep', '120']); time.sleep(120)"
    driver = subprocess.Popen([sys.executable, "-c", code])
    while not processes.descendants(driver.pid):
        time.sleep(0.02)
    (orphan,) = processes.descendants(driver.pid)
    started = processes._stat(orphan)[1]
    folder = processes.records()
    folder.mkdir(parents=True)
    record = {"processes": [[orphan, started]]}
    (folder / f"{driver.pid}-{processes._stat(driver.pid)[1]}.json").write_text(json.dumps(record))
    # a live driver's record and a pid whose start time does not match are left alone
    me = f"{os.getpid()}-{processes._stat(os.getpid())[1]}.json"
    (folder / me).write_text(json.dumps(record))
    assert processes.reap() == [] and processes._stat(orphan) is not None
    (folder / me).unlink()
    driver.kill()
    driver.wait()
    assert processes._stat(orphan) is not None  # outlives its driver
    stale = {"processes": [[orphan, started + 1]]}
    (folder / "999999999-1.json").write_text(json.dumps(stale))
    assert processes.reap() == [orphan]
    assert processes._stat(orphan) is None and not list(folder.iterdir())


@pytest.mark.parametrize("line", ["[1, 2]", "null", '"start"', "3"])
def test_a_journal_line_that_is_not_an_object_is_named(tmp_path, line):
    journal = Journal(tmp_path)
    journal.start({"digest": "x"})
    with open(journal.path, "a") as f:
        f.write(line + "\n" + json.dumps({"kind": "tick", "t": 0}) + "\n")
    with pytest.raises(JournalError, match="line 2 is not a JSON object"):
        journal.read()
