"""Run (or resume) a MARA training experiment under Ray Tune.

:func:`train` checks an experiment's inputs, runs the behaviour-cloning warm start
(:mod:`mara_agents.training.clone`) when the experiment asks for one, and runs or resumes the Tune
experiment of its PPO config (:mod:`mara_agents.training.ppo`), with the ``mara/`` TensorBoard
logger (:mod:`mara_agents.training.curves`) next to Tune's own; it returns the result grid.
"""

from __future__ import annotations

from pathlib import Path

import ray
from ray import tune

from mara_agents.training.clone import pretrain
from mara_agents.training.curves import MaraTensorBoard
from mara_agents.training.experiment import Experiment
from mara_agents.training.ppo import build_config
from mara_agents.training.records import (
    RECORD,
    check_inputs,
    check_out,
    check_unchanged,
    write_record,
)
from mara_agents.training.rllib_env import register
from mara_env.config import ConfigError


def train(
    exp: Experiment,
    out: str | Path = "runs",
    resume: bool = False,
    address: str | None = None,
    num_env_runners: int | None = None,
    verbose: int = 1,
) -> tune.ResultGrid:
    """Run (or with ``resume`` continue) the experiment under ``out/<name>``.

    Its inputs, ``out`` and (with ``resume``) the recorded experiment are checked before
    Ray starts; a bad one raises :class:`~mara_env.config.ConfigError`.
    """
    out = check_out(out)
    exp_dir = out / exp.name
    check_inputs(exp)
    if resume:
        if not tune.Tuner.can_restore(str(exp_dir)):
            raise ConfigError(f"resume: nothing to resume in {exp_dir} (no Tune run there)")
        check_unchanged(exp, exp_dir / RECORD)
    if num_env_runners is not None and num_env_runners < 0:
        raise ConfigError(f"num_env_runners={num_env_runners}: expected an integer >= 0")
    build_config(exp, num_env_runners)  # the RLlib settings together, before any work
    weights = None
    if exp.pretrain.init_weights:
        # absolute: Tune runs the trial in its own directory
        weights = str(Path(exp.pretrain.init_weights).resolve())
    if exp.pretrain.clones and not resume:
        weights = pretrain(exp, exp_dir.with_name(exp.name + "_pretrain.pt"))
    if not ray.is_initialized():
        # "local": never attach to some other Ray instance running on this machine
        ray.init(address=address or "local", include_dashboard=False, log_to_driver=verbose > 1)
    register()
    if resume:
        tuner = tune.Tuner.restore(str(exp_dir), trainable="PPO", resume_errored=True)
        return tuner.fit()
    write_record(exp, exp_dir / RECORD)
    config = build_config(exp, num_env_runners, init_weights=weights)
    ck = exp.checkpoint
    tuner = tune.Tuner(
        "PPO",
        param_space=config,
        run_config=tune.RunConfig(
            name=exp.name,
            storage_path=str(out),
            stop=exp.tune_stop(),
            verbose=verbose,
            callbacks=[MaraTensorBoard()],
            checkpoint_config=tune.CheckpointConfig(
                checkpoint_frequency=ck.frequency,
                num_to_keep=ck.keep,
                checkpoint_at_end=ck.at_end,
            ),
        ),
    )
    return tuner.fit()
