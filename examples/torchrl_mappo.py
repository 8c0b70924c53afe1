"""Train TorchRL's MAPPO on ``mara/ComputeCluster-v1`` for a fixed wall-clock budget.

A third-party reference point: TorchRL's multi-agent PPO recipe, run unchanged in spirit on
our registered env through ``torchrl.envs.PettingZooWrapper``.

* **Env.** The *parallel* env (``pettingzoo.make("parallel", mara_env.ENV_ID, ...)``): all
  N nodes choose at once from the round's start, so one TorchRL step is one tick.  A choice
  that finds its task's cap already filled by lower-numbered nodes counts as idle (see
  ``mara_env.cluster_env.parallel_raw_env``); the AEC env would let later nodes see earlier
  choices, but costs N wrapper steps a tick.  TorchRL groups ``node_0 … node_{N-1}`` under
  the key ``"node"``, moves each node's ``action_mask`` to ``("node", "action_mask")`` and,
  with ``return_state=True``, puts the env's ``state()`` at ``"state"``.
* **Actor.** One MLP shared by every node (``MultiAgentMLP(share_params=True,
  centralized=False)``) maps a node's ``observation`` to logits over ``K + 1`` actions; a
  ``MaskedCategorical`` samples only valid actions.  The greedy policy takes its mode.
* **Critic.** An MLP of the global ``state`` (centralized); every node gets its value,
  since every node receives the same team reward.
* **Training.** ``Collector`` batches of ``--frames-per-batch`` ticks on the train split,
  GAE, ``ClipPPOLoss``; it stops after the first update that ends past ``--minutes``.
* **Evaluation.** The greedy policy on ``--eval-episodes`` episodes of the evaluation split
  (seeds ``--eval-seed``, ``--eval-seed`` + 1, …), next to the built-in schedulers of
  ``mara_env.schedulers`` on the same seeds (same seed, same tasks): mean completion rate
  with the half-width of its 95% t-interval (``mara_agents.evaluation.stats.mean_ci``).

The learning curve goes to ``--out`` as CSV with one row per PPO iteration: ``wall_s``
(seconds since training started), ``frames`` (ticks collected so far), ``episodes``
(training episodes finished in the iteration) and ``completion_rate`` (their mean; empty
when none finished).

How to run
----------
    pip install -e ".[torchrl]"
    python examples/torchrl_mappo.py --minutes 10 --out runs/torchrl_mappo.csv
    python examples/torchrl_mappo.py --help

Results to expect
-----------------
Measured on 2 shared cores, one torch thread, ``nice -n 10``, torchrl 0.14.1 (N=16, K=32,
load 1.0, horizon 120, seed 0, defaults; 30 greedy episodes of the val split on seeds
10000-10029):

    --minutes 10   52k ticks (836k node decisions) in 601 s
                   MAPPO 0.171 ± 0.028   uniform 0.809 ± 0.028   EDF 0.753 ± 0.051
                   random 0.527 ± 0.044

(mean completion rate ± 95% half-width; 11.4 min wall in all).  MAPPO stays far below
every built-in scheduler, random included, at this budget: its stochastic policy moves
nodes between tasks, and a node that moves works nothing that tick (warm-up), so it must
first learn to stay on its task (``is_mine``), slot by slot.  The training curve rises
from ~0.04 (first 20 iterations) to ~0.15 (last 20) and has not flattened.  Most of the
time is collection: TorchRL's wrapper costs ~10 ms a tick, mostly spec indexing per
agent, against under 1 ms for the env itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pettingzoo
import torch
from pettingzoo.utils.wrappers import BaseParallelWrapper
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.collectors import Collector
from torchrl.envs import PettingZooWrapper
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import MLP, MaskedCategorical, MultiAgentMLP, ProbabilisticActor
from torchrl.objectives import ClipPPOLoss, ValueEstimators

import mara_env
from mara_agents.evaluation.stats import mean_ci
from mara_env.schedulers import SCHEDULERS, run_episode

GROUP = "node"  # TorchRL groups agents named "node_<i>" under this key


def _opt(default: Any, help: str) -> Any:
    """A dataclass field that is also a command-line option with this help."""
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class Config:
    """Every setting of the run, with its default; the command line reads these."""

    minutes: float = _opt(10.0, "wall-clock budget of training (collection + updates)")
    seed: int = _opt(0, "seed of torch and of the training episodes")
    out: str = _opt("runs/torchrl_mappo.csv", "CSV file for the learning curve")
    eval_episodes: int = _opt(30, "greedy evaluation episodes")
    eval_seed: int = _opt(10_000, "seed of the first evaluation episode (then +1, +2, ...)")
    eval_split: str = _opt("val", "trace split of the evaluation episodes")
    train_split: str = _opt("train", "trace split of the training episodes")
    nodes: int = _opt(16, "compute nodes N (agents)")
    slots: int = _opt(32, "visible task slots K (actions: K slots + idle)")
    load: float = _opt(1.0, "load factor rho")
    horizon: int = _opt(120, "ticks with arrivals")
    frames_per_batch: int = _opt(512, "ticks collected per PPO iteration")
    epochs: int = _opt(10, "passes over each batch")
    minibatch: int = _opt(128, "ticks per gradient step (each holds every node's choice)")
    lr: float = _opt(1e-3, "Adam learning rate of actor and critic")
    gamma: float = _opt(0.99, "discount per tick")
    lmbda: float = _opt(0.95, "GAE lambda")
    clip: float = _opt(0.2, "PPO clip epsilon")
    entropy: float = _opt(0.003, "entropy bonus coefficient")
    max_grad_norm: float = _opt(1.0, "gradient-norm clip")
    hidden: int = _opt(128, "width of the two hidden layers of actor and critic")

    def env_kwargs(self, split: str) -> dict[str, Any]:
        """Keyword arguments of the registered env for one trace split."""
        return {
            "num_nodes": self.nodes,
            "num_slots": self.slots,
            "load": self.load,
            "horizon": self.horizon,
            "split": split,
        }


class CompletionLog(BaseParallelWrapper):
    """The parallel env, keeping the completion rate of every episode it finishes
    (TorchRL's wrapper does not pass the env's ``infos`` on)."""

    def __init__(self, env: pettingzoo.ParallelEnv) -> None:
        super().__init__(env)
        self.rates: list[float] = []

    def step(self, actions: dict[str, Any]) -> tuple:
        out = self.env.step(actions)
        if not self.env.agents:  # the parallel env empties ``agents`` at the episode's end
            self.rates.append(self.env.unwrapped.engine.sim.metrics()["completion_rate"])
        return out


def make_env(cfg: Config, split: str, seed: int) -> tuple[PettingZooWrapper, CompletionLog]:
    """The registered parallel env on ``split``, wrapped for TorchRL, and its episode log."""
    log = CompletionLog(pettingzoo.make("parallel", mara_env.ENV_ID, **cfg.env_kwargs(split)))
    return PettingZooWrapper(log, return_state=True, seed=seed), log


class TeamValue(nn.Module):
    """Value of the global state, repeated for each node (all share the team reward)."""

    def __init__(self, state_dim: int, n_agents: int, hidden: int) -> None:
        super().__init__()
        self.net = MLP(
            in_features=state_dim,
            out_features=1,
            depth=2,
            num_cells=hidden,
            activation_class=nn.Tanh,
        )
        self.n_agents = n_agents

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        value = self.net(state).unsqueeze(-2)
        return value.expand(*value.shape[:-2], self.n_agents, 1)


def make_actor_critic(
    env: PettingZooWrapper, cfg: Config
) -> tuple[ProbabilisticActor, TensorDictModule]:
    """Shared-parameter masked actor on each node's observation; critic on the state."""
    obs_dim = env.observation_spec[GROUP, "observation", "observation"].shape[-1]
    state_dim = env.observation_spec["state"].shape[-1]
    n_actions = env.full_action_spec[GROUP, "action"].space.n
    logits = MultiAgentMLP(
        n_agent_inputs=obs_dim,
        n_agent_outputs=n_actions,
        n_agents=cfg.nodes,
        centralized=False,
        share_params=True,
        depth=2,
        num_cells=cfg.hidden,
        activation_class=nn.Tanh,
    )
    actor = ProbabilisticActor(
        TensorDictModule(
            logits, in_keys=[(GROUP, "observation", "observation")], out_keys=[(GROUP, "logits")]
        ),
        in_keys={"logits": (GROUP, "logits"), "mask": (GROUP, "action_mask")},
        out_keys=[(GROUP, "action")],
        distribution_class=MaskedCategorical,
        return_log_prob=True,
    )
    critic = TensorDictModule(
        TeamValue(state_dim, cfg.nodes, cfg.hidden),
        in_keys=["state"],
        out_keys=[(GROUP, "state_value")],
    )
    return actor, critic


def train(
    cfg: Config,
    env: PettingZooWrapper,
    log: CompletionLog,
    actor: ProbabilisticActor,
    critic: TensorDictModule,
) -> tuple[pd.DataFrame, float]:
    """PPO until the budget is spent; returns the learning curve and training seconds."""
    loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=cfg.clip,
        entropy_coeff=cfg.entropy,
        normalize_advantage=True,
    )
    loss.set_keys(
        reward=(GROUP, "reward"),
        action=(GROUP, "action"),
        value=(GROUP, "state_value"),
        done=(GROUP, "done"),
        terminated=(GROUP, "terminated"),
    )
    loss.make_value_estimator(ValueEstimators.GAE, gamma=cfg.gamma, lmbda=cfg.lmbda)
    optim = torch.optim.Adam(loss.parameters(), lr=cfg.lr)
    # The policy is feed-forward: the env needs no transforms for it (InitTracker etc.).
    collector = Collector(
        env,
        actor,
        frames_per_batch=cfg.frames_per_batch,
        total_frames=-1,
        auto_register_policy_transforms=False,
    )
    rows, frames, seen = [], 0, 0
    start = time.perf_counter()
    for batch in collector:
        with torch.no_grad():
            loss.value_estimator(batch)
        data = batch.reshape(-1)
        for _ in range(cfg.epochs):
            for idx in torch.randperm(len(data)).split(cfg.minibatch):
                terms = loss(data[idx])
                total = terms["loss_objective"] + terms["loss_critic"] + terms["loss_entropy"]
                optim.zero_grad()
                total.backward()
                nn.utils.clip_grad_norm_(loss.parameters(), cfg.max_grad_norm)
                optim.step()
        collector.update_policy_weights_()
        frames += batch.numel()
        finished, seen = log.rates[seen:], len(log.rates)
        # nanmean: an episode without tasks has no completion rate (nan)
        rate = float(np.nanmean(finished)) if np.isfinite(finished).any() else float("nan")
        wall = time.perf_counter() - start
        rows.append(
            {"wall_s": wall, "frames": frames, "episodes": len(finished), "completion_rate": rate}
        )
        print(f"{wall:7.1f} s  {frames:>8} frames  completion {rate:.3f}", flush=True)
        if wall >= cfg.minutes * 60:
            break
    collector.shutdown()
    return pd.DataFrame(rows), time.perf_counter() - start


def evaluate(cfg: Config, actor: ProbabilisticActor, seeds: list[int]) -> list[float]:
    """Completion rate of the greedy (mode of the masked distribution) policy per seed."""
    env, log = make_env(cfg, cfg.eval_split, seeds[0])
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        for seed in seeds:
            # Every episode ends (deadlines pass); max_steps is only a bound.
            env.rollout(10**6, actor, tensordict=env.reset(seed=seed), auto_reset=False)
    return log.rates


def parse_args(argv: list[str] | None = None) -> Config:
    """The command line: one option per :class:`Config` field, same name with dashes."""
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    for f in dataclasses.fields(Config):
        p.add_argument(
            f"--{f.name.replace('_', '-')}",
            type=type(f.default),
            default=f.default,
            help=f.metadata["help"],
        )
    return Config(**vars(p.parse_args(argv)))


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Train, evaluate next to the built-in schedulers, print; returns the figures."""
    cfg = parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    env, log = make_env(cfg, cfg.train_split, cfg.seed)
    actor, critic = make_actor_critic(env, cfg)
    curve, train_s = train(cfg, env, log, actor, critic)
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    curve.to_csv(out, index=False)

    seeds = [cfg.eval_seed + i for i in range(cfg.eval_episodes)]
    rates = {"mappo": evaluate(cfg, actor, seeds)}
    engine = pettingzoo.make(
        "parallel", mara_env.ENV_ID, **cfg.env_kwargs(cfg.eval_split)
    ).unwrapped.engine
    for name, scheduler in SCHEDULERS.items():
        rates[name] = [
            run_episode(scheduler(), engine.config, engine.traces, s)["completion_rate"]
            for s in seeds
        ]
    frames = int(curve["frames"].iloc[-1])
    result: dict[str, float] = {"frames": frames, "train_seconds": train_s}
    print(
        f"trained {frames} frames ({frames * cfg.nodes} node decisions) in {train_s:.0f} s; "
        f"{cfg.eval_episodes} greedy episodes on split {cfg.eval_split!r} "
        f"(N={cfg.nodes}, K={cfg.slots}, load={cfg.load}); curve: {out}"
    )
    for name, values in rates.items():
        mean, half = mean_ci(np.asarray(values))
        result[name], result[f"{name}_ci95"] = mean, half
        print(f"  {name:<8} completion rate {mean:.3f} ± {half:.3f}")
    return result


if __name__ == "__main__":
    # TorchRL names the PettingZoo version it tests (1.24.3); this repository tests 1.27.
    warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested")
    # Every node has the same advantage (team reward, team value): normalising over the
    # node dimension too is intended.
    warnings.filterwarnings("ignore", message="You requested advantage normalization")
    main()
