"""RLlib's stock PPO on ``mara/ComputeCluster-v3``: its default module with action masking.

What an RL researcher who knows RLlib (2.60, new API stack: RLModule, Learner, EnvRunner,
ConnectorV2) writes first, and nothing of this project's own RLlib pipeline
(``mara_agents.training``: no ``MaraRLModule``, no round view, no experiment YAML).

* **Env.** ``--env plain``: the registered AEC env, ``pettingzoo.make("aec",
  mara_env.ENV_ID, ...)``, through RLlib's ``PettingZooEnv``, a turn-based
  ``MultiAgentEnv``: one RLlib env step is one node's choice, N of them a tick.
  ``--env stay``: the opt-in ``mara_env.marl.StayWrapper`` (a *stay* action, a conflict
  rule that idles no node that lost a race, one tick a step) through
  ``ParallelPettingZooEnv``, the wrapper for PettingZoo's parallel API: one RLlib env step
  is one tick, all N nodes choose in it.
* **Module.** RLlib's ``ActionMaskingTorchRLModule``
  (``ray.rllib.examples.rl_modules.classes.action_masking_rlm``): the default PPO module
  (separate policy and value MLPs of RLlib's default model config) whose logits of masked
  actions are set to the float minimum.  One module, ``"shared"``, acts for every node
  (``policy_mapping_fn``).  It reads the observation dict ``{"observations",
  "action_mask"}``; the env's is ``{"observation", "action_mask", "state"}``, so the one
  ConnectorV2 piece :class:`MaskedObservations` renames ``observation`` and drops
  ``state`` (the stock module has no centralised critic) before RLlib's default
  env-to-module pieces run; the learner sees the renamed observations too.
* **PPO.** RLlib's defaults (``PPOConfig()``) except: ``gamma=1.0`` (undiscounted, so
  an episode's return is its completions: the potential-based shaping sums to zero);
  ``vf_clip_param=inf``, since RLlib clips the value loss at 10 by default, and a
  return-to-go here is tens of completions, so the clipped loss would pass no gradient
  to the critic until its error is below sqrt(10); ``--train-batch-size``,
  ``--minibatch-size`` and ``--num-epochs`` default to RLlib's and are options only so
  that the smoke test can run a tiny batch.  RLlib counts the batch in env steps, so its
  default 4000 is 250 ticks of ``plain`` and 4000 ticks (64,000 node choices) of
  ``stay`` at N = 16.  Training runs on the *train* split, with one torch thread in this
  process, and stops after the first iteration that ends past ``--minutes`` of wall
  time (evaluation not counted).
* **Evaluation.** On the val split with the seeds of ``mara evaluate --split val --seeds
  S`` (episode ``i`` has seed ``mara_agents.evaluation.runner.episode_seed(S, load, i)``,
  ``S = --eval-seed``), through the env the module trained on: the module before any
  update (greedy), after training greedy (arg-max of the masked logits) and sampled
  (from the masked categorical), and uniformly random valid actions; next to the random
  *policy* (``mara_env.cluster_env.play_random`` through the AEC env) and the built-in
  schedulers (``random`` there keeps nodes in place) on the same seeds
  (``mara_agents.evaluation.references``): mean completion rate with the half-width of
  its 95% t-interval, and the paired difference of the trained greedy policy with each
  scheduler.

Outputs in ``--out``: ``curve.csv``, one row per training iteration: ``iteration``,
``wall_s`` (training seconds so far), ``env_steps`` (RLlib env steps sampled so far),
``episodes`` (training episodes finished in the iteration) and ``train_completion``
(their mean completion rate; sampled actions); ``result.json``, the configuration and
every final figure.

How to run
----------
    pip install -e ".[rllib]"   # ray[rllib] and torch
    python examples/rllib_stock_ppo.py --env stay --minutes 25 --out runs/rllib_stock/stay
    python examples/rllib_stock_ppo.py --env plain --minutes 25 --out runs/rllib_stock/plain
    python examples/rllib_stock_ppo.py --help

Results to expect
-----------------
Measured on 2 cores shared with another training job (``nice 10``), ray 2.60.0, N=16,
K=32, load 1.0, horizon 120, seed 0, defaults otherwise; 30 val episodes, seeds
``episode_seed(0, 1.0, i)``, mean completion rate ± the 95% half-width:

    --env stay --minutes 25   14 iterations, 56k ticks, 1589 s
        greedy 0.619 ± 0.037 (untrained 0.568 ± 0.028), sampled 0.287 ± 0.053;
        greedy minus the random scheduler, paired: +0.106 ± 0.031
    --env plain --minutes 20   151 iterations, 38k ticks, 1200 s (2 cores alone)
        greedy 0.085 ± 0.018 (untrained 0.219 ± 0.025), sampled 0.085 ± 0.017;
        greedy minus the random scheduler, paired: -0.428 ± 0.038

On the same episodes uniform share completes 0.806 ± 0.028, EDF 0.750 ± 0.041, the
``random`` scheduler 0.513 ± 0.042 and the random policy 0.049 ± 0.012.  An iteration of
the stay env took about 110 s; ``docs/other_libraries.md`` discusses the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
import pettingzoo
import ray
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.connectors.env_to_module.observation_preprocessor import (
    MultiAgentObservationPreprocessor,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModule, RLModuleSpec
from ray.rllib.env.multi_agent_env import MultiAgentEnv
from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv, PettingZooEnv
from ray.rllib.examples.rl_modules.classes.action_masking_rlm import (
    ActionMaskingTorchRLModule,
)
from ray.tune.registry import register_env

import mara_env
from mara_agents.evaluation.references import (
    completion_summary,
    env_kwargs,
    episode_figures,
    episode_seeds,
    lead_lines,
    paired_leads,
    reference_episodes,
)
from mara_env import marl
from mara_env.config import ClusterConfig

ENVS = ("plain", "stay")
MODULE = "shared"  # the one RLModule every node maps to
ENV_NAME = "mara_rllib_stock"  # RLlib's registry name of the env creator below
STOCK = PPOConfig()  # RLlib's defaults, for the options that keep them


@dataclass(frozen=True)
class Config:
    """Every setting of the run, with its default; :func:`parse_args` reads these."""

    env: str = "stay"
    minutes: float = 10.0
    nodes: int = 16
    slots: int = 32
    load: float = 1.0
    horizon: int = 120
    seed: int = 0
    episodes: int = 30
    eval_seed: int = 0
    out: str = "runs/rllib_stock_ppo"
    num_env_runners: int = STOCK.num_env_runners
    train_batch_size: int = STOCK.train_batch_size_per_learner
    minibatch_size: int = STOCK.minibatch_size
    num_epochs: int = STOCK.num_epochs

    def __post_init__(self) -> None:
        if self.env not in ENVS:
            raise ValueError(f"env={self.env!r}: expected one of {list(ENVS)}")
        if not self.minutes > 0:
            raise ValueError(f"minutes={self.minutes}: expected a positive training budget")
        if self.episodes < 2:
            raise ValueError(f"episodes={self.episodes}: expected at least 2 (for an interval)")
        if self.num_env_runners < 0:
            raise ValueError(f"num_env_runners={self.num_env_runners}: expected 0 or more")
        for name in ("train_batch_size", "minibatch_size", "num_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)}: expected a positive integer")
        ClusterConfig.from_dict(self.env_kwargs("train"))  # the env's own checks, up front

    def env_kwargs(self, split: str) -> dict[str, Any]:
        """Keyword arguments of the registered env for one trace split."""
        return env_kwargs(self, split)


def masked_observation(obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One node's observation as RLlib's masking module reads it."""
    return {"observations": obs["observation"], "action_mask": obs["action_mask"]}


class MaskedObservations(MultiAgentObservationPreprocessor):
    """Env-to-module ConnectorV2 piece: every node's observation as :func:`masked_observation`."""

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        return gym.spaces.Dict(
            {
                agent: gym.spaces.Dict(masked_observation(space.spaces))
                for agent, space in input_observation_space.spaces.items()
            }
        )

    def preprocess(self, observations: dict[str, Any], episode: Any) -> dict[str, Any]:
        return {agent: masked_observation(obs) for agent, obs in observations.items()}


def make_rllib_env(env_config: dict[str, Any]) -> MultiAgentEnv:
    """The RLlib env of ``env_config``: ``wrapper`` (``plain`` or ``stay``) and the env's
    keyword arguments."""
    kwargs = dict(env_config)
    if kwargs.pop("wrapper") == "stay":
        return ParallelPettingZooEnv(marl.parallel_env(**kwargs))
    return PettingZooEnv(pettingzoo.make("aec", mara_env.ENV_ID, **kwargs))


def record_completion(episode: Any, metrics_logger: Any, **_: Any) -> None:
    """``on_episode_end``: add the episode's completion rate (from the env's last
    ``infos``) to the iteration's sum and count."""
    infos = episode.get_infos(-1).values()
    rate = next((i["episode"]["completion_rate"] for i in infos if "episode" in i), math.nan)
    if math.isfinite(rate):  # an episode without tasks has no rate
        metrics_logger.log_value("completion_sum", rate, reduce="sum")
        metrics_logger.log_value("completion_episodes", 1, reduce="sum")


def ppo_config(cfg: Config) -> PPOConfig:
    """RLlib's PPO with its defaults, except ``gamma`` and ``vf_clip_param`` (see above)."""
    register_env(ENV_NAME, make_rllib_env)
    return (
        PPOConfig()
        .environment(ENV_NAME, env_config={"wrapper": cfg.env, **cfg.env_kwargs("train")})
        .env_runners(
            num_env_runners=cfg.num_env_runners,
            env_to_module_connector=lambda env, spaces, device: MaskedObservations(),
        )
        .multi_agent(
            policies={MODULE}, policy_mapping_fn=lambda agent_id, episode, **kwargs: MODULE
        )
        .rl_module(
            rl_module_spec=MultiRLModuleSpec(
                rl_module_specs={MODULE: RLModuleSpec(module_class=ActionMaskingTorchRLModule)}
            )
        )
        .training(
            gamma=1.0,
            vf_clip_param=float("inf"),
            train_batch_size_per_learner=cfg.train_batch_size,
            minibatch_size=cfg.minibatch_size,
            num_epochs=cfg.num_epochs,
        )
        .callbacks(on_episode_end=record_completion)
        .debugging(seed=cfg.seed)
    )


def act(
    module: RLModule | None, observations: dict[str, Any], rng: torch.Generator | None
) -> dict[str, int]:
    """Every observed node's action: arg-max of the module's masked logits, a sample of
    them (``rng`` not None), or (``module`` None) a uniformly random valid action."""
    rows = [masked_observation(obs) for obs in observations.values()]
    batch = {k: torch.as_tensor(np.stack([r[k] for r in rows])) for k in rows[0]}
    if module is None:
        logits = torch.log(batch["action_mask"].float())
    else:
        with torch.no_grad():
            logits = module.forward_inference({Columns.OBS: batch})[Columns.ACTION_DIST_INPUTS]
    if rng is None:
        chosen = logits.argmax(-1)
    else:
        chosen = torch.multinomial(torch.softmax(logits, -1), 1, generator=rng)[:, 0]
    return dict(zip(observations, chosen.tolist()))


def play(
    cfg: Config, module: RLModule | None, seeds: list[int], sample: bool
) -> list[dict[str, float]]:
    """``episode_figures`` per seed of :func:`act` through the env ``cfg.env`` on the val
    split (greedy unless ``sample``; uniformly random valid actions if ``module`` is None)."""
    rng = torch.Generator().manual_seed(cfg.seed) if sample or module is None else None
    kwargs = cfg.env_kwargs("val")
    env = marl.parallel_env(**kwargs) if cfg.env == "stay" else mara_env.env(**kwargs)
    figures = []
    for seed in seeds:
        infos: list[dict[str, Any]] = []  # every choice's infos entry
        if cfg.env == "stay":
            observations, _ = env.reset(seed=seed)
            while env.agents:
                observations, _, _, _, step_infos = env.step(act(module, observations, rng))
                infos.extend(step_infos.values())
        else:
            env.reset(seed=seed)
            for agent in env.agent_iter():
                obs, _, term, trunc, info = env.last()
                infos.append(info)
                env.step(None if term or trunc else act(module, {agent: obs}, rng)[agent])
        idled = sum("masked_action" in i for i in infos)
        bumped = sum("bumped" in i for i in infos)
        figures.append(episode_figures(env.unwrapped.engine.sim.metrics(), idled, bumped))
    return figures


def learner_module(algo: Algorithm) -> RLModule:
    """The shared module with the learner's weights (``algo.get_module`` is the local
    EnvRunner's, which RLlib does not keep in sync while remote EnvRunners sample)."""
    module = algo.get_module(MODULE)
    module.set_state(algo.learner_group.get_weights([MODULE])[MODULE])
    return module


def train(cfg: Config, algo: Algorithm) -> tuple[pd.DataFrame, float]:
    """PPO iterations until the first that ends past ``cfg.minutes``; the curve (one row
    per iteration) and the training seconds."""
    rows, start = [], time.perf_counter()
    while True:
        result = algo.train()
        spent = time.perf_counter() - start
        runners = result["env_runners"]
        # RLlib reports a sum nothing was logged to in this iteration as nan (or not at all)
        episodes, total = (
            float(np.nan_to_num(runners.get(f"completion_{k}", 0.0))) for k in ("episodes", "sum")
        )
        rows.append(
            {
                "iteration": int(result["training_iteration"]),
                "wall_s": spent,
                "env_steps": int(runners["num_env_steps_sampled_lifetime"]),
                "episodes": int(episodes),
                "train_completion": total / episodes if episodes else float("nan"),
            }
        )
        print(
            f"iteration {rows[-1]['iteration']:>4}  {spent:7.1f} s  "
            f"{rows[-1]['env_steps']:>9} env steps  {rows[-1]['episodes']:>4} episodes  "
            f"training completion {rows[-1]['train_completion']:.3f}",
            flush=True,
        )
        if spent >= 60 * cfg.minutes:
            return pd.DataFrame(rows), spent


def run(cfg: Config) -> dict[str, Any]:
    """Train, evaluate next to the references, write ``cfg.out``; returns the figures
    (``<name>`` and ``<name>_ci95`` per evaluated policy)."""
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=cfg.num_env_runners > 0)
    # One torch thread for the learner in this process (RLlib's EnvRunner actors get one,
    # OMP_NUM_THREADS=1, from Ray): on 2 cores shared with other work, torch's default of
    # one thread per core made an iteration 16 times slower (small matmuls spin-waiting).
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    algo = ppo_config(cfg).build_algo()
    seeds = episode_seeds(cfg.eval_seed, cfg.load, cfg.episodes)
    episodes = {"ppo_untrained": play(cfg, learner_module(algo), seeds, sample=False)}
    curve, train_s = train(cfg, algo)
    module = learner_module(algo)
    episodes["ppo"] = play(cfg, module, seeds, sample=False)
    episodes["ppo_sampled"] = play(cfg, module, seeds, sample=True)
    episodes["random_actions"] = play(cfg, None, seeds, sample=True)
    episodes.update(reference_episodes(cfg.env_kwargs("val"), seeds))
    algo.stop()

    result: dict[str, Any] = {
        "iterations": int(curve["iteration"].iloc[-1]),
        "env_steps": int(curve["env_steps"].iloc[-1]),
        "train_seconds": train_s,
        **completion_summary(episodes),
        **paired_leads(episodes, "ppo"),
    }
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    curve.to_csv(out / "curve.csv", index=False)
    (out / "result.json").write_text(
        json.dumps(
            {"config": dataclasses.asdict(cfg), "ray": ray.__version__, **result, "seeds": seeds},
            indent=2,
        )
    )
    print(
        f"PPO ({cfg.env}): {result['iterations']} iterations, {result['env_steps']} env steps "
        f"in {train_s:.0f} s; {cfg.episodes} episodes of split 'val' "
        f"(N={cfg.nodes}, K={cfg.slots}, load={cfg.load}); {out}"
    )
    print(f"  {'':<15} {'completion rate':>15}  moves/tick  idled/tick  bumped/tick")
    for n in episodes:
        print(
            f"  {n:<15} {result[n]:>7.3f} ± {result[f'{n}_ci95']:.3f}  "
            f"{result[f'{n}_moves_per_tick']:>10.2f}  {result[f'{n}_idled_per_tick']:>10.2f}  "
            f"{result[f'{n}_bumped_per_tick']:>11.2f}"
        )
    print("\n".join(lead_lines(result, "ppo")))
    return result


def parse_args(argv: list[str] | None = None) -> Config:
    """The command line: one option per :class:`Config` field."""
    d = Config()
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--env",
        choices=ENVS,
        default=d.env,
        help="plain: the registered AEC env through RLlib's PettingZooEnv (one env step per "
        "node's choice); stay: the opt-in mara_env.marl.StayWrapper parallel env through "
        "ParallelPettingZooEnv (one env step per tick, a stay action, no node idled by a race)",
    )
    p.add_argument(
        "--minutes",
        type=float,
        default=d.minutes,
        help="wall-clock budget of training: stops after the first iteration that ends past "
        "it (evaluation not counted)",
    )
    p.add_argument("--nodes", type=int, default=d.nodes, help="compute nodes N (agents)")
    p.add_argument("--slots", type=int, default=d.slots, help="visible task slots K")
    p.add_argument("--load", type=float, default=d.load, help="load factor rho")
    p.add_argument("--horizon", type=int, default=d.horizon, help="ticks with arrivals")
    p.add_argument(
        "--seed", type=int, default=d.seed, help="seed of RLlib (module, env runners) and torch"
    )
    p.add_argument(
        "--episodes",
        type=int,
        default=d.episodes,
        help="val episodes of the final evaluation (every policy plays the same ones)",
    )
    p.add_argument(
        "--eval-seed",
        type=int,
        default=d.eval_seed,
        help="base seed of the val episodes, as `mara evaluate --split val --seeds S`",
    )
    p.add_argument("--out", default=d.out, help="output folder (curve.csv, result.json)")
    p.add_argument(
        "--num-env-runners",
        type=int,
        default=d.num_env_runners,
        help="RLlib EnvRunner actors that sample in parallel (0: sample in this process); "
        "RLlib's default",
    )
    p.add_argument(
        "--train-batch-size",
        type=int,
        default=d.train_batch_size,
        help="RLlib env steps per training iteration (train_batch_size_per_learner); "
        "RLlib's default",
    )
    p.add_argument(
        "--minibatch-size",
        type=int,
        default=d.minibatch_size,
        help="samples per SGD step; RLlib's default",
    )
    p.add_argument(
        "--num-epochs",
        type=int,
        default=d.num_epochs,
        help="passes over each training batch; RLlib's default",
    )
    args = vars(p.parse_args(argv))
    try:
        return Config(**args)
    except ValueError as exc:
        p.error(str(exc))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """The command line: :func:`run` of :func:`parse_args`."""
    return run(parse_args(argv))


if __name__ == "__main__":
    main()
