"""Train MARA with RLlib PPO through Ray Tune, from a validated :class:`Experiment`.

* :func:`build_config` turns an experiment into a ``PPOConfig`` (new API stack, one shared
  module for all nodes, centralized critic, gamma = 1, the experiment's overrides last).
* :class:`MaraMetrics` logs the simulator's episode metrics next to RLlib's; Tune's
  TensorBoard logger writes them as ``ray/tune/env_runners/mara/<metric>``, and node
  decisions per second of wall time as ``ray/tune/mara/node_decisions_per_s``.
* ``view: node`` trains on the AEC env (one RLlib step per node decision, module
  :class:`MaraRLModule` shared by all nodes); ``view: round`` on
  :class:`~mara_env.round_env.RoundEnv` (one step per decision round, module
  :class:`MaraRoundModule`, which decodes the N nodes autoregressively).
* :func:`pretrain` clones a heuristic scheduler (behaviour cloning + critic regression)
  into a state dict the module loads at setup (warm start).
* :func:`train` runs (or resumes) the Tune experiment and returns the result grid.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch
from ray import tune
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from mara_agents.experiment import (
    RECORD,
    Experiment,
    check_inputs,
    check_out,
    check_unchanged,
    write_record,
)
from mara_agents.network import MASKED_LOGIT, MaraNet, ObsLayout, model_config_from
from mara_agents.rl_module import SHARED_MODULE_ID, MaraRLModule, MaraRoundModule
from mara_agents.rllib_env import ROUND_ENV_ID, make_wrapped_env, register
from mara_env.config import ConfigError

# Episode metrics (from the simulator) logged per episode, averaged per iteration.
EPISODE_METRICS = (
    "completion_rate",
    "completed",
    "expired",
    "tasks",
    "utilisation",
    "reassignments",
    "wasted_node_ticks",
)
TRAINING_DEFAULTS: dict[str, Any] = {
    "gamma": 1.0,
    "lambda_": 0.95,
    "lr": 3e-4,
    "train_batch_size_per_learner": 8000,
    "minibatch_size": 1000,
    "num_epochs": 4,
    "entropy_coeff": 0.01,
    "vf_loss_coeff": 0.5,
    "vf_clip_param": 1000.0,
    "clip_param": 0.2,
    "grad_clip": 1.0,
}
ENV_RUNNER_DEFAULTS: dict[str, Any] = {"num_env_runners": 1, "num_envs_per_env_runner": 4}
# What the warm start depends on: a change to any of these makes its saved stages stale.
PRETRAIN_SECTIONS = ("seed", "env", "wrapper", "wrapper_options", "model", "pretrain")


def policy_mapping_fn(agent_id: str, episode: Any = None, **kwargs: Any) -> str:
    """Every node uses the shared module (parameter sharing)."""
    return SHARED_MODULE_ID


def decisions_per_step(config: Any) -> int:
    """Node decisions per RLlib env step: N for the round view, 1 for the node view."""
    return int(config.env_config["cluster"]["num_nodes"]) if config.env == ROUND_ENV_ID else 1


class MaraMetrics(RLlibCallback):
    """Log the simulator's episode metrics (``infos["episode"]``) under ``mara/``, and
    node decisions (lifetime, and per second of wall time in each iteration) under
    ``mara/`` of the training result."""

    def on_environment_created(self, *, env_runner: Any = None, **kwargs: Any) -> None:
        # Env runners infer one step at a time: intra-op threads only add contention
        # (on a busy 2-core machine a tiny layer_norm took 10 ms with 2 threads).
        torch.set_num_threads(1)

    def on_algorithm_init(self, *, algorithm: Any, **kwargs: Any) -> None:
        self._clock = time.perf_counter()

    def on_train_result(self, *, algorithm: Any, result: dict, **kwargs: Any) -> None:
        now = time.perf_counter()
        elapsed, self._clock = now - getattr(self, "_clock", now), now
        per_step = decisions_per_step(algorithm.config)
        runners = result.get("env_runners", {})
        steps = float(runners.get("num_env_steps_sampled", 0.0))
        lifetime = float(runners.get("num_env_steps_sampled_lifetime", 0.0))
        result["mara"] = {
            "node_decisions": lifetime * per_step,
            "node_decisions_per_s": steps * per_step / elapsed if elapsed > 0 else float("nan"),
        }

    def on_episode_end(
        self,
        *,
        episode: Any,
        prev_episode_chunks: list[Any] | None = None,
        metrics_logger: Any = None,
        **kwargs: Any,
    ) -> None:
        if metrics_logger is None:
            return
        chunks = [*(prev_episode_chunks or []), episode]
        # The episode may have been sampled in several chunks; the team return is the
        # round view's return, or one node's, summed over all of them.
        if hasattr(episode, "agent_episodes"):
            last = {aid: sa.get_infos()[-1:] for aid, sa in episode.agent_episodes.items()}
            final = [(aid, i[0]["episode"]) for aid, i in last.items() if i and "episode" in i[0]]
            if not final:
                return
            agent, info = final[0]
            team_return = sum(
                chunk.agent_episodes[agent].get_return()
                for chunk in chunks
                if agent in chunk.agent_episodes
            )
        else:
            last = episode.get_infos()[-1:]
            if not last or "episode" not in last[0]:
                return
            info = last[0]["episode"]
            team_return = sum(chunk.get_return() for chunk in chunks)
        for key in EPISODE_METRICS:
            metrics_logger.log_value(("mara", key), float(info[key]), reduce="mean", window=50)
        # With gamma = 1 the shaped return telescopes to the completions; a gap means a
        # truncated episode (Phi set to 0 early) or a shaping bug.
        metrics_logger.log_value(("mara", "shaped_return"), float(team_return), window=50)
        metrics_logger.log_value(
            ("mara", "shaped_minus_completed"), float(team_return) - info["completed"], window=50
        )


def build_config(
    exp: Experiment, num_env_runners: int | None = None, init_weights: str | None = None
) -> PPOConfig:
    """The PPO config of an experiment (overrides from ``exp.rllib`` applied last).

    ``init_weights``: a ``MaraNet`` state dict (the warm start) every module loads at setup.
    """
    model = dict(exp.model)
    if init_weights:
        model["init_weights"] = str(init_weights)
    runners = {**ENV_RUNNER_DEFAULTS, **exp.rllib.get("env_runners", {})}
    if num_env_runners is not None:
        runners["num_env_runners"] = num_env_runners
    node_env = register()
    config = (
        PPOConfig()
        .environment(
            ROUND_ENV_ID if exp.view == "round" else node_env,
            env_config=exp.env_config(),
            disable_env_checking=True,
        )
        .framework("torch")
        .env_runners(**runners)
        .training(**{**TRAINING_DEFAULTS, **exp.rllib.get("training", {})})
        .callbacks(MaraMetrics)
        .debugging(seed=exp.seed)
    )
    if exp.view == "round":
        config.rl_module(
            rl_module_spec=RLModuleSpec(module_class=MaraRoundModule, model_config=model)
        )
    else:
        config.multi_agent(policies={SHARED_MODULE_ID}, policy_mapping_fn=policy_mapping_fn)
        config.rl_module(
            rl_module_spec=MultiRLModuleSpec(
                rl_module_specs={
                    SHARED_MODULE_ID: RLModuleSpec(module_class=MaraRLModule, model_config=model)
                }
            )
        )
    for method, kwargs in exp.rllib.items():
        if method not in ("env_runners", "training"):
            getattr(config, method)(**kwargs)
    return config


# ---- behaviour-cloning warm start ---------------------------------------------------------
def collect_demonstrations(
    exp: Experiment, episodes: int, seed: int, policy: MaraNet | None = None
) -> dict[str, np.ndarray]:
    """Per-step obs, the teacher's actions and returns-to-go from ``episodes`` env episodes.

    Without ``policy`` the teacher (``exp.pretrain.scheduler``) acts; with one (DAgger)
    the policy acts greedily, the teacher only labels the states the policy reaches, and
    ``"taken"`` holds the policy's own actions.
    """
    from mara_agents.registry import make_scheduler
    from mara_env.schedulers import SchedulerAgent

    env = make_wrapped_env(exp.env_config())
    # The spec was checked when the experiment was parsed.
    agent = SchedulerAgent(make_scheduler(exp.pretrain.scheduler))
    obs, masks, states, actions, taken, targets = [], [], [], [], [], []
    for ep in range(episodes):
        env.reset(seed=seed + ep)
        agent.reset(env, seed + ep)
        rounds: list[int] = []  # round index of each recorded step
        rewards: list[float] = []  # team reward of each round
        for name in env.agent_iter():
            o, _, term, trunc, _ = env.last()
            if term or trunc:
                env.step(None)
                continue
            if name == env.possible_agents[0]:
                rewards.append(0.0)
            a = agent.act(env, name)
            obs.append(o["observation"])
            masks.append(o["action_mask"])
            states.append(o["state"])
            actions.append(a)
            rounds.append(len(rewards) - 1)
            if policy is not None:
                with torch.no_grad():
                    x = torch.from_numpy(o["observation"])[None]
                    a = int(policy.logits(x, torch.from_numpy(o["action_mask"])[None]).argmax())
                taken.append(a)
            env.step(a)
            if name == env.possible_agents[-1]:
                rewards[-1] = float(env.rewards[name])
        to_go = np.cumsum(np.asarray(rewards)[::-1])[::-1]
        targets.append(to_go[np.asarray(rounds)])
    data = {
        "obs": np.asarray(obs, np.float32),
        "mask": np.asarray(masks, np.float32),
        "state": np.asarray(states, np.float32),
        "action": np.asarray(actions, np.int64),
        "return": np.concatenate(targets).astype(np.float32),
    }
    if policy is not None:
        data["taken"] = np.asarray(taken, np.int64)  # the policy's own (executed) actions
    return data


def _fit(
    net: MaraNet,
    data: dict[str, np.ndarray],
    epochs: int,
    value_epochs: int,
    exp: Experiment,
    log: Any,
    stage: str,
) -> None:
    """Cross-entropy on the teacher's actions and critic regression, minibatch Adam."""
    cfg = exp.pretrain
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    t = {k: torch.from_numpy(v) for k, v in data.items()}
    n = len(t["action"])
    gen = torch.Generator().manual_seed(exp.seed)
    for epoch in range(max(epochs, value_epochs)):
        perm = torch.randperm(n, generator=gen)
        total, correct = 0.0, 0
        for i in range(0, n, cfg.batch_size):
            idx = perm[i : i + cfg.batch_size]
            loss = torch.zeros(())
            if epoch < epochs:
                logits = net.logits(t["obs"][idx], t["mask"][idx])
                target = t["action"][idx]
                # Demonstrations the policy cannot take (idling while a slot is valid,
                # under work_conserving) would dominate the loss: clone the others only.
                ok = logits.gather(1, target[:, None]).squeeze(1) > MASKED_LOGIT / 2
                if ok.any():
                    loss = torch.nn.functional.cross_entropy(logits[ok], target[ok])
                correct += int((logits.argmax(-1) == target).sum())
            if epoch < value_epochs:
                err = (net.value(t["state"][idx]) - t["return"][idx]) / net.config.value_scale
                loss = loss + 0.5 * (err**2).mean()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            total += loss.item() * len(idx)
        accuracy = f"  action accuracy {correct / n:.3f}" if epoch < epochs else " (critic only)"
        log(f"{stage} epoch {epoch + 1}: loss {total / n:.4f}{accuracy}")


def pretrain(exp: Experiment, out: Path, log: Any = None, resume: bool = False) -> Path:
    """Behaviour-clone ``exp.pretrain.scheduler`` into a ``MaraNet`` state dict at ``out``.

    Stages: behaviour cloning on the teacher's episodes (``<out>_bc.pt``), then
    ``dagger_rounds`` DAgger rounds (``<out>_dagger<r>.pt``): the clone drives
    ``dagger_episodes`` episodes, the teacher labels them, and the net is refit on all
    data so far.  With ``resume`` a finished stage's file is loaded instead of refitting
    (its demonstrations are collected again: they are deterministic given the seeds), once
    the experiment is found unchanged since those stages ran (``<out>.yaml`` records it).
    """
    log = log or functools.partial(print, flush=True)
    cfg = exp.pretrain
    out = check_out(Path(out).parent) / Path(out).name
    check_inputs(exp)
    record = out.with_suffix(".yaml")
    if resume:
        check_unchanged(exp, record)
    write_record(exp, record, sections=PRETRAIN_SECTIONS)
    t0 = time.time()
    data = collect_demonstrations(exp, cfg.episodes, seed=10_000 + exp.seed)
    log(
        f"pretrain: {len(data['action'])} steps from {cfg.episodes} episodes "
        f"of {cfg.scheduler} in {time.time() - t0:.0f}s"
    )
    layout = ObsLayout.infer(data["obs"].shape[1], data["state"].shape[1], data["mask"].shape[1])
    torch.manual_seed(exp.seed)
    net = MaraNet(layout, model_config_from(exp.model))
    out.parent.mkdir(parents=True, exist_ok=True)

    def stage(path: Path, fit: Any) -> None:
        if resume and path.is_file():
            net.load_state_dict(torch.load(path, weights_only=True))
            log(f"pretrain: resumed {path}")
        else:
            fit()
            torch.save(net.state_dict(), path)

    stage(
        out.with_name(out.stem + "_bc.pt"),
        functools.partial(_fit, net, data, cfg.epochs, cfg.value_epochs, exp, log, "pretrain"),
    )
    for r in range(cfg.dagger_rounds):
        t0 = time.time()
        net.eval()
        new = collect_demonstrations(
            exp, cfg.dagger_episodes, seed=20_000 + exp.seed + 1_000 * r, policy=net
        )
        net.train()
        agree = float(np.mean(new["action"] == new.pop("taken")))
        log(
            f"dagger round {r + 1}: {len(new['action'])} steps from {cfg.dagger_episodes} "
            f"episodes driven by the clone in {time.time() - t0:.0f}s; "
            f"clone agrees with {cfg.scheduler} on {agree:.3f} of them"
        )
        data = {k: np.concatenate([data[k], new[k]]) for k in data}
        stage(
            out.with_name(f"{out.stem}_dagger{r + 1}.pt"),
            functools.partial(
                _fit, net, data, cfg.dagger_epochs, cfg.dagger_epochs, exp, log, "dagger"
            ),
        )
    torch.save(net.state_dict(), out)
    return out


# ---- running ------------------------------------------------------------------------------
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
    weights = None
    if exp.pretrain.init_weights:
        # absolute: Tune runs the trial in its own directory
        weights = str(Path(exp.pretrain.init_weights).resolve())
    if exp.pretrain.episodes > 0 and not resume:
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
            checkpoint_config=tune.CheckpointConfig(
                checkpoint_frequency=ck.frequency,
                num_to_keep=ck.keep,
                checkpoint_at_end=ck.at_end,
            ),
        ),
    )
    return tuner.fit()


CURVES = (
    ("env_runners/mara/completion_rate", "completion rate (train episodes)"),
    ("env_runners/mara/shaped_return", "shaped return = completions"),
    ("env_runners/mara/reassignments", "re-assignments per episode"),
)


def _nested(d: dict[str, Any], path: str) -> float:
    for key in path.split("/"):
        if not isinstance(d, dict) or key not in d:
            return float("nan")
        d = d[key]
    return float(d)


def _result_rows(trial_dir: str | Path) -> list[dict[str, Any]]:
    import json

    lines = (Path(trial_dir) / "result.json").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def write_learning_curves_csv(trial_dir: str | Path, path: str | Path) -> Path:
    """One row per training iteration: ``training_iteration``, ``time_total_s``,
    ``num_env_steps_sampled_lifetime``, ``node_decisions`` and ``node_decisions_per_s``
    (:class:`MaraMetrics`) and every simulator metric logged under ``env_runners/mara/``
    (empty where no episode ended in that iteration).

    Tune's own ``progress.csv`` fixes its columns at the first iteration, before any episode
    has ended, so it never holds these metrics; this file does.
    """
    import pandas as pd

    rows = []
    for r in _result_rows(trial_dir):
        row = {k: r.get(k) for k in ("training_iteration", "time_total_s")}
        row["num_env_steps_sampled_lifetime"] = _nested(r, "num_env_steps_sampled_lifetime")
        row.update({k: float(v) for k, v in r.get("mara", {}).items() if np.isscalar(v)})
        mara = r.get("env_runners", {}).get("mara", {})
        row.update({k: float(v) for k, v in mara.items() if np.isscalar(v)})
        rows.append(row)
    pd.DataFrame(rows).to_csv(path, index=False)
    return Path(path)


def learning_curves(trial_dir: str | Path) -> dict[str, np.ndarray]:
    """``num_env_steps_sampled_lifetime`` and :data:`CURVES` per iteration of a trial.

    Read from ``result.json`` (Tune's CSV fixes its columns at the first iteration, before
    any episode has ended, so the episode metrics are missing there).
    """
    rows = _result_rows(trial_dir)
    keys = ("num_env_steps_sampled_lifetime", *(c for c, _ in CURVES))
    return {k: np.array([_nested(r, k) for r in rows]) for k in keys}


def plot_learning_curves(trial_dir: str | Path, png: str | Path) -> Path:
    """Plot :data:`CURVES` against sampled agent steps for one trial."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = learning_curves(trial_dir)
    x = data["num_env_steps_sampled_lifetime"] / 1e6
    fig, axes = plt.subplots(1, len(CURVES), figsize=(4.2 * len(CURVES), 3.2))
    for ax, (col, title) in zip(axes, CURVES):
        ok = np.isfinite(data[col])  # iterations in which no episode ended
        ax.plot(x[ok], data[col][ok], marker=".")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("agent steps sampled (millions)")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return Path(png)
