"""Before and after a run starts: the files it reads, the directory it writes, the record
of its experiment that a resumption must match."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from mara_agents.outputs import INPUTS, input_digests, output_dir_problem
from mara_agents.training.experiment import (
    AdvantageConfig,
    CriticConfig,
    Experiment,
    WarmupConfig,
)
from mara_env.config import ConfigError

# The record of the experiment a run was started with, inside its directory.
RECORD = "experiment.yaml"


def check_inputs(exp: Experiment) -> None:
    """The files a run reads exist and load: ``env.traces`` (its split), ``env.jobs`` and
    each of ``train_jobs`` (days of its split that carry each training load),
    ``init_weights``."""
    from mara_env.job_logs import JobsError
    from mara_env.replay import replay_summary
    from mara_env.traces import TraceError, load_traces

    where = exp.path or "experiment"
    env = exp.env
    try:
        load_traces(env.traces, split=env.split, families=list(env.families or []))
    except TraceError as e:
        raise ConfigError(f"{where}: env.traces={env.traces!r}: {e}") from None
    if env.jobs is not None:
        try:
            replay_summary(env)
        except JobsError as e:
            raise ConfigError(f"{where}: env.jobs={env.jobs!r}: {e}") from None
    # every (workload, load) the round view mixes: train_jobs (or env.jobs) x train_loads
    key = "train_jobs" if exp.train_jobs else "env.jobs"
    for jobs in (j for j in exp.train_jobs or (env.jobs,) if j is not None):
        for load in exp.train_loads or (env.load,):
            if (jobs, load) == (env.jobs, env.load):
                continue  # checked above
            try:
                replay_summary(env.replace(jobs=jobs, load=load))
            except JobsError as e:
                raise ConfigError(f"{where}: {key}: {jobs!r} at load {load:g}: {e}") from None
    init = exp.pretrain.init_weights
    if init and not Path(init).is_file():
        raise ConfigError(f"{where}: pretrain.init_weights={init!r}: no such file; {_maker(exp)}")


def _maker(exp: Experiment) -> str:
    """How to make ``exp``'s missing ``init_weights``: run first the experiment beside its
    file that writes it, found by name (``mara train`` writes ``<name>_pretrain.pt``, and
    the YAML headers and ``mara reproduce --full`` export ``<name>.pt``), or else what such
    a file is."""
    stem = Path(exp.pretrain.init_weights).stem.removesuffix("_pretrain")
    stage = Path(exp.path).with_name(f"{stem}.yaml") if exp.path else None
    if stage is not None and stage.is_file():
        return f"run the stage that writes it first: {stage} (its header's 'How to run')"
    return (
        "expected a MaraNet state dict such as runs/mara_pretrain.pt from `mara train ... "
        "--pretrain-only`, or a policy file from `mara export`"
    )


def check_out(out: str | Path) -> Path:
    """``out`` as an absolute path, once a directory can be made and written there (the
    CLI's probe: :func:`mara_agents.outputs.output_dir_problem`)."""
    out = Path(out).expanduser().absolute()
    problem = output_dir_problem(out)
    if problem is not None:
        raise ConfigError(f"out={str(out)!r}: {problem}")
    return out


def experiment_record(exp: Experiment) -> dict[str, Any]:
    """The experiment as plain YAML data (no file path, nor the cluster's history the run
    was handed: what its inputs' digests record): what a run records and compares."""
    data = {k: v for k, v in dataclasses.asdict(exp).items() if k not in ("path", "history")}
    if not data["train_loads"]:  # runs recorded before the key existed compare equal
        del data["train_loads"]
    if not data["train_jobs"]:  # likewise
        del data["train_jobs"]
    if data["advantage"] == dataclasses.asdict(AdvantageConfig()):  # likewise
        del data["advantage"]
    if data["warmup"]["critic_lr"] is None:  # likewise
        del data["warmup"]["critic_lr"]
    if data["warmup"] == {
        k: v for k, v in dataclasses.asdict(WarmupConfig()).items() if v is not None
    }:
        del data["warmup"]  # likewise
    if data["critic"] == dataclasses.asdict(CriticConfig()):  # likewise
        del data["critic"]
    if data["env"]["jobs"] is None and "train_jobs" not in data:  # likewise: unused then
        for key in [k for k in data["env"] if k.startswith("jobs")]:
            del data["env"][key]
    if data["env"]["throughput"] == "known":  # likewise: the default before the key existed
        del data["env"]["throughput"]
    data[INPUTS] = input_digests(input_files(exp))  # a record without them compares equal
    return yaml.safe_load(yaml.safe_dump(_plain(data)))


def input_files(exp: Experiment) -> list[tuple[str, Path]]:
    """The files a resumed run of ``exp`` reads again, by key: the trace library and the
    jobs tables its episodes draw from (those that exist: :func:`check_inputs` names a
    missing one).  The warm start is read once, before the first iteration (and a stage
    retrained under it is named by :mod:`mara_agents.reproduce`'s own check)."""
    from mara_env.job_logs import jobs_path
    from mara_env.traces import SHIPPED_LIBRARY

    files = [("env.traces", Path(exp.env.traces or SHIPPED_LIBRARY))]
    files += [("env.jobs", jobs_path(exp.env.jobs))] if exp.env.jobs else []
    files += [("train_jobs", jobs_path(j)) for j in exp.train_jobs or () if j]
    return [(key, path) for key, path in files if path.is_file()]


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """``key.path: old -> new`` for every value that differs between two records."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            line
            for k in sorted(set(old) | set(new), key=str)
            for line in differences(old.get(k), new.get(k), f"{path}.{k}" if path else str(k))
        ]
    return [] if old == new else [f"{path}: {old!r} -> {new!r}"]


def write_record(exp: Experiment, record: Path, sections: tuple[str, ...] | None = None) -> None:
    """Write the experiment (or some of its top-level ``sections``) to ``record``."""
    data = experiment_record(exp)
    if sections is not None:
        data = {k: data[k] for k in sections}
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(
        f"# The experiment this run started with ({exp.path or 'experiment'}); "
        "--resume refuses another.\n" + yaml.safe_dump(data, sort_keys=False)
    )


def check_unchanged(exp: Experiment, record: Path, free: tuple[str, ...] = ()) -> None:
    """Refuse to resume when ``exp`` differs from the experiment recorded at ``record``.

    ``free``: ``section.key`` names that may change between the run and its resumption.
    """
    if not record.is_file():
        return  # a run started before runs recorded their experiment
    old = yaml.safe_load(record.read_text())
    new = {k: v for k, v in experiment_record(exp).items() if k in old}
    for name in free:
        section, key = name.split(".")
        for data in (old, new):
            if isinstance(data.get(section), dict):
                data[section].pop(key, None)
    diff = differences(old, new)
    if diff:
        raise ConfigError(
            f"{exp.path or 'experiment'} differs from the run it would resume ({record}): "
            f"{'; '.join(diff)}; expected the same experiment (a run resumes with the settings "
            "it started with: restore them, or start a new run under another name or --out)"
        )
