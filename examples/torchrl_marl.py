"""Train TorchRL's multi-agent algorithms (MAPPO, IPPO, VDN, QMIX) on ``mara/ComputeCluster-v3``.

A third-party reference point: the standard cooperative-MARL recipes, built from TorchRL
0.14's own pieces (``torchrl.objectives.multiagent``, ``MultiAgentMLP``, the mixers,
``Collector``), on our registered env through ``torchrl.envs.PettingZooWrapper``, for a
fixed wall-clock budget.  BenchMARL would give the same recipes, but its 1.5.2 release
needs torchrl < 0.12 (it imports ``SyncDataCollector``, gone in 0.14), and this project
uses torchrl 0.14 (``docs/other_libraries.md``).

* **Env.** The *parallel* env (``pettingzoo.make("parallel", mara_env.ENV_ID, ...)``):
  all N nodes choose at once from the round's start, so one TorchRL step is one tick.  A
  choice that finds its task's cap already filled by lower-numbered nodes counts as idle
  (``mara_env.cluster_env.parallel_raw_env``).  TorchRL groups ``node_0 … node_{N-1}``
  under the key ``"node"``, moves each node's ``action_mask`` to ``("node",
  "action_mask")`` and, with ``return_state=True``, puts the env's ``state()`` at
  ``"state"``; every node gets the team reward.  With ``--stay`` the env is
  ``mara_env.marl.StayWrapper`` instead: a *stay* action, a conflict rule that idles no
  node that lost a race, and ``--interval`` ticks per step (so per TorchRL step).
* **Policies.** Every network is shared by all nodes (``MultiAgentMLP(share_params=True,
  centralized=False)``) and reads a node's ``observation``.  With ``--actor slots`` the
  policy (or Q-network) is :class:`SlotScorer` instead: one MLP scores every slot from
  the node's features, its own task's row and that slot's row, so the slots share their
  weights; critics stay MLPs.  MAPPO and IPPO sample a
  ``MaskedCategorical`` over the action mask (greedy: its mode); VDN and QMIX take the
  masked arg-max of their Q-values (``QValueModule``), exploring with masked
  epsilon-greedy (``EGreedyModule``) while they train.
* **Algorithms.** ``mappo``: ``MAPPOLoss``, a critic of the global ``state`` (every node
  gets its value: they share the reward).  ``ippo``: ``IPPOLoss``, a critic per node of
  its own ``observation``.  Both: ``Collector`` batches of ``--frames-per-batch`` steps
  on the train split, GAE, ``--epochs`` passes of ``--minibatch`` steps.  ``vdn`` /
  ``qmix``: ``QMixerLoss`` with ``VDNMixer`` (sum of the nodes' Q-values) or ``QMixer``
  (a monotonic mixer conditioned on ``state``), one-step TD targets from a soft-updated
  target network, a replay buffer of ``--buffer`` steps and ``--updates`` gradient steps
  per collected batch.  Training stops after the first update that ends past
  ``--minutes`` (evaluation time is not counted).
* **Evaluation.** On the val split with the seeds the project's harness uses
  (``mara evaluate --split val --seeds S``: episode ``i`` at load ``rho`` has seed
  ``mara_agents.evaluation.runner.episode_seed(S, rho, i)``, ``S = --eval-seed``).  Every
  ``--eval-every`` training seconds the greedy policy plays the first
  ``--curve-episodes`` of them; at the end it plays ``--episodes``, next to the built-in
  schedulers of ``mara_env.schedulers`` (``random`` there keeps nodes in place), the
  random *policy* (uniformly random valid actions, ``mara_env.cluster_env.play_random``
  through the AEC env) and uniformly random valid actions through the env it trained on
  (``random_actions``): mean completion rate with the half-width of its 95% t-interval.

Outputs in ``--out``: ``curve.csv``, one row per evaluation point (the first before any
update), with ``wall_s`` (training seconds so far), ``frames`` (TorchRL steps), ``ticks``
(simulator ticks), ``train_episodes`` and ``train_completion`` (training episodes
finished since the last row and their mean completion rate) and ``val_completion``;
``result.json``, the configuration and every final figure (per evaluated policy also the
nodes that move, the choices idled and the choices bumped per tick); ``policy.pt``, the
greedy policy's ``state_dict``.

How to run
----------
    pip install -e ".[torchrl]"
    python examples/torchrl_marl.py --algorithm mappo --minutes 10 --out runs/marl/mappo
    python examples/torchrl_marl.py --algorithm mappo --stay --minutes 10 --out runs/marl/stay
    python examples/torchrl_marl.py --help

Results to expect
-----------------
Measured on 2 cores, two runs at a time, one torch thread, torchrl 0.14.1 (N=16, K=32,
load 1.0, horizon 120, the defaults; greedy policy on 100 val episodes, seeds
``episode_seed(0, 1.0, i)``):

    --algorithm mappo --stay --minutes 60 --seed 0   793k frames   0.743 ± 0.016

EDF completes 0.765 ± 0.022 of the same tasks (paired: -0.022 ± 0.015), uniform share
0.813 ± 0.014 and the random policy 0.047 ± 0.007.  The first recipe (``--lmbda 0.95
--gamma 0.99 --frames-per-batch 512 --minibatch 128 --epochs 10``) reached 0.628 in 60
minutes; why λ matters, the other algorithms and ``--actor slots`` are in
``docs/other_libraries.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pettingzoo
import torch
from pettingzoo.utils.wrappers import BaseParallelWrapper
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.collectors import Collector
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs import PettingZooWrapper
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import (
    MLP,
    EGreedyModule,
    MaskedCategorical,
    MultiAgentMLP,
    ProbabilisticActor,
    QValueModule,
)
from torchrl.modules.models.multiagent import QMixer, VDNMixer
from torchrl.objectives import SoftUpdate, ValueEstimators
from torchrl.objectives.multiagent import IPPOLoss, MAPPOLoss, QMixerLoss

import mara_env
from mara_agents.evaluation.references import (
    completion_summary,
    env_kwargs,
    episode_figures,
    episode_seeds,
    lead_lines,
    mean_of,
    paired_leads,
    reference_episodes,
)
from mara_env import marl
from mara_env.cluster_env import NODE_FEATURES, SLOT_FEATURES

GROUP = "node"  # TorchRL groups agents named "node_<i>" under this key
OBS = (GROUP, "observation", "observation")  # a node's policy input
MASK = (GROUP, "action_mask")
ALGORITHMS = ("mappo", "ippo", "vdn", "qmix")
ACTORS = ("mlp", "slots")


def _opt(default: Any, help: str, kind: type | None = None) -> Any:
    """A dataclass field that is also a command-line option with this help (``kind``: its
    type, where the default is ``None``)."""
    return field(default=default, metadata={"help": help, "type": kind or type(default)})


# What a ``None`` of these settings means, per kind of algorithm.  The PPO recipe's GAE
# lambda of 0.5 and larger batches are measured in docs/other_libraries.md ("What slowed
# MAPPO"): with lambda 0.95 a node's advantage sums some 20 ticks of every node's choices
# and the cost of one move is lost in them.
RECIPES: dict[str, dict[str, Any]] = {
    "ppo": {"gamma": 0.95, "frames_per_batch": 2048, "minibatch": 256},
    "value": {"gamma": 0.99, "frames_per_batch": 512, "minibatch": 128},
}


@dataclass(frozen=True)
class Config:
    """Every setting of the run, with its default; the command line reads these."""

    algorithm: str = _opt("mappo", f"one of {list(ALGORITHMS)}")
    minutes: float = _opt(10.0, "wall-clock budget of training (evaluation not counted)")
    seed: int = _opt(0, "seed of torch and of the training episodes")
    out: str = _opt("runs/torchrl_marl", "output folder (curve.csv, result.json)")
    episodes: int = _opt(30, "val episodes of the final greedy evaluation")
    curve_episodes: int = _opt(5, "val episodes of each learning-curve point")
    eval_every: float = _opt(60.0, "training seconds between learning-curve points")
    eval_seed: int = _opt(0, "base seed of the val episodes (as `mara evaluate --seeds`)")
    eval_split: str = _opt("val", "trace split of the evaluation episodes")
    train_split: str = _opt("train", "trace split of the training episodes")
    stay: bool = _opt(False, "opt-in: train and evaluate on mara_env.marl.StayWrapper")
    interval: int = _opt(1, "ticks per step of StayWrapper (needs --stay)")
    nodes: int = _opt(16, "compute nodes N (agents)")
    slots: int = _opt(32, "visible task slots K")
    load: float = _opt(1.0, "load factor rho")
    horizon: int = _opt(120, "ticks with arrivals")
    hidden: int = _opt(128, "width of the two hidden layers of every network")
    actor: str = _opt(
        "mlp",
        f"network of the policy (or Q-values): one of {list(ACTORS)}; 'slots' scores "
        "every slot with one MLP of (node, own task, slot) features",
    )
    lr: float = _opt(1e-3, "Adam learning rate")
    gamma: float | None = _opt(
        None, "discount per step (default: 0.95 for mappo/ippo, 0.99 for vdn/qmix)", float
    )
    max_grad_norm: float = _opt(1.0, "gradient-norm clip")
    frames_per_batch: int | None = _opt(
        None, "steps collected per iteration (default: 2048 for mappo/ippo, 512 for vdn/qmix)", int
    )
    minibatch: int | None = _opt(
        None,
        "steps per gradient step, each holding every node's choice (default: 256 for "
        "mappo/ippo, 128 for vdn/qmix)",
        int,
    )
    epochs: int = _opt(4, "PPO: passes over each batch")
    lmbda: float = _opt(0.5, "PPO: GAE lambda")
    shaping: float = _opt(
        1.0, "coefficient of the training env's progress shaping (evaluation counts completions)"
    )
    clip: float = _opt(0.2, "PPO: clip epsilon")
    entropy: float = _opt(0.003, "PPO: entropy bonus coefficient")
    updates: int = _opt(16, "VDN/QMIX: gradient steps per collected batch")
    buffer: int = _opt(10_000, "VDN/QMIX: replay buffer size in steps")
    eps_start: float = _opt(1.0, "VDN/QMIX: initial epsilon of epsilon-greedy")
    eps_end: float = _opt(0.05, "VDN/QMIX: final epsilon")
    eps_frames: int = _opt(50_000, "VDN/QMIX: steps over which epsilon decays")
    tau: float = _opt(0.005, "VDN/QMIX: soft target-network update rate")
    mixing_embed: int = _opt(32, "QMIX: width of the mixing network")

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm {self.algorithm!r}: expected one of {list(ALGORITHMS)}")
        if self.actor not in ACTORS:
            raise ValueError(f"actor {self.actor!r}: expected one of {list(ACTORS)}")
        if self.interval != 1 and not self.stay:
            raise ValueError(f"interval={self.interval} needs stay=True (--stay)")
        recipe = RECIPES["ppo" if self.algorithm in ("mappo", "ippo") else "value"]
        for name, value in recipe.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)

    def env_kwargs(self, split: str) -> dict[str, Any]:
        """Keyword arguments of the registered env for one trace split (the training
        split's reward with ``shaping``)."""
        kwargs = env_kwargs(self, split)
        if split == self.train_split:
            kwargs["shaping"] = self.shaping
        return kwargs

    def eval_seeds(self, episodes: int) -> list[int]:
        """The harness's seeds of the first ``episodes`` evaluation episodes."""
        return episode_seeds(self.eval_seed, self.load, episodes)


class EpisodeLog(BaseParallelWrapper):
    """The parallel env, keeping :func:`episode_figures` of every episode it finishes and
    the ticks it ran (TorchRL's wrapper does not pass the env's ``infos`` on)."""

    def __init__(self, env: pettingzoo.ParallelEnv) -> None:
        super().__init__(env)
        self.episodes: list[dict[str, float]] = []
        self.ticks = 0
        self._idled = self._bumped = 0

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple:
        self._idled = self._bumped = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, actions: dict[str, Any]) -> tuple:
        sim = self.env.unwrapped.engine.sim
        before = sim.t
        out = self.env.step(actions)
        self.ticks += sim.t - before
        infos = out[4].values()
        self._idled += sum("masked_action" in info for info in infos)
        self._bumped += sum("bumped" in info for info in infos)
        if not self.env.agents:  # the parallel env empties ``agents`` at the episode's end
            self.episodes.append(episode_figures(sim.metrics(), self._idled, self._bumped))
        return out


def make_env(cfg: Config, split: str, seed: int) -> tuple[PettingZooWrapper, EpisodeLog]:
    """The parallel env (under the opt-in with ``cfg.stay``) on ``split``, wrapped for
    TorchRL, and its episode log."""
    kwargs = cfg.env_kwargs(split)
    if cfg.stay:
        par = marl.parallel_env(interval=cfg.interval, **kwargs)
    else:
        par = pettingzoo.make("parallel", mara_env.ENV_ID, **kwargs)
    log = EpisodeLog(par)
    return PettingZooWrapper(log, return_state=True, seed=seed), log


def node_mlp(cfg: Config, n_in: int, n_out: int) -> MultiAgentMLP:
    """An MLP shared by every node, of that node's input alone."""
    return MultiAgentMLP(
        n_agent_inputs=n_in,
        n_agent_outputs=n_out,
        n_agents=cfg.nodes,
        centralized=False,
        share_params=True,
        depth=2,
        num_cells=cfg.hidden,
        activation_class=nn.Tanh,
    )


class SlotScorer(nn.Module):
    """Per-action outputs of one node's observation that treat the K slots alike.

    One MLP scores each slot from (the node's features, the row of the task it serves,
    that slot's row); a second MLP gives the actions past the slots (idle, and stay under
    the opt-in) from (the node's features, its task's row, the mean row of the occupied
    slots).  The weights are shared by the slots, so what is learnt of one slot holds for
    every slot: an MLP of the flat observation has to learn each slot's output apart.
    Works on any leading dimensions (agents, batch), so every node shares it.
    """

    def __init__(self, slots: int, n_actions: int, hidden: int) -> None:
        super().__init__()
        self.k, self.node_dim, self.slot_dim = slots, len(NODE_FEATURES), len(SLOT_FEATURES)
        self.mine = SLOT_FEATURES.index("is_mine")
        self.occupied = SLOT_FEATURES.index("occupied")

        def mlp(n_in: int, n_out: int) -> MLP:
            return MLP(
                in_features=n_in,
                out_features=n_out,
                depth=2,
                num_cells=hidden,
                activation_class=nn.Tanh,
            )

        self.score = mlp(self.node_dim + 2 * self.slot_dim, 1)
        self.rest = mlp(self.node_dim + 2 * self.slot_dim, n_actions - slots)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        node = obs[..., : self.node_dim]
        rows = obs[..., self.node_dim :].unflatten(-1, (self.k, self.slot_dim))
        own = (rows * rows[..., self.mine : self.mine + 1]).sum(-2)  # zeros: no task
        occupied = rows[..., self.occupied : self.occupied + 1]
        pooled = (rows * occupied).sum(-2) / occupied.sum(-2).clamp(min=1.0)
        context = torch.cat([node, own], -1)
        per_slot = torch.cat([context.unsqueeze(-2).expand(*rows.shape[:-1], -1), rows], -1)
        return torch.cat(
            [self.score(per_slot).squeeze(-1), self.rest(torch.cat([context, pooled], -1))], -1
        )


def node_policy(cfg: Config, n_in: int, n_out: int) -> nn.Module:
    """The shared network of a node's per-action outputs (``--actor``)."""
    if cfg.actor == "slots":
        return SlotScorer(cfg.slots, n_out, cfg.hidden)
    return node_mlp(cfg, n_in, n_out)


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


@dataclass
class Learner:
    """What the training loop needs of an algorithm."""

    policy: TensorDictModule  # acts while collecting (explores)
    greedy: TensorDictModule  # acts in evaluation (under DETERMINISTIC exploration)
    update: Callable[[TensorDictBase], None]  # learns from one collected batch


def _step(optim: torch.optim.Optimizer, params: Any, loss: torch.Tensor, clip: float) -> None:
    """One gradient step on ``loss`` with the gradient norm clipped to ``clip``."""
    optim.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(params, clip)
    optim.step()


def make_ppo(cfg: Config, env: PettingZooWrapper) -> Learner:
    """MAPPO (critic of ``state``) or IPPO (critic of each node's observation)."""
    obs_dim = env.observation_spec[OBS].shape[-1]
    n_actions = env.full_action_spec[GROUP, "action"].space.n
    actor = ProbabilisticActor(
        TensorDictModule(
            node_policy(cfg, obs_dim, n_actions), in_keys=[OBS], out_keys=[(GROUP, "logits")]
        ),
        in_keys={"logits": (GROUP, "logits"), "mask": MASK},
        out_keys=[(GROUP, "action")],
        distribution_class=MaskedCategorical,
        return_log_prob=True,
    )
    value = (GROUP, "state_value")
    if cfg.algorithm == "mappo":
        state_dim = env.observation_spec["state"].shape[-1]
        critic = TensorDictModule(
            TeamValue(state_dim, cfg.nodes, cfg.hidden), in_keys=["state"], out_keys=[value]
        )
        loss_class = MAPPOLoss
    else:
        critic = TensorDictModule(node_mlp(cfg, obs_dim, 1), in_keys=[OBS], out_keys=[value])
        loss_class = IPPOLoss
    loss = loss_class(actor, critic, clip_epsilon=cfg.clip, entropy_coeff=cfg.entropy)
    loss.set_keys(
        reward=(GROUP, "reward"),
        action=(GROUP, "action"),
        value=value,
        done=(GROUP, "done"),
        terminated=(GROUP, "terminated"),
    )
    loss.make_value_estimator(ValueEstimators.GAE, gamma=cfg.gamma, lmbda=cfg.lmbda)
    optim = torch.optim.Adam(loss.parameters(), lr=cfg.lr)

    def update(batch: TensorDictBase) -> None:
        with torch.no_grad():
            loss.value_estimator(batch)
        data = batch.reshape(-1)
        for _ in range(cfg.epochs):
            for idx in torch.randperm(len(data)).split(cfg.minibatch):
                terms = loss(data[idx])
                total = terms["loss_objective"] + terms["loss_critic"] + terms["loss_entropy"]
                _step(optim, loss.parameters(), total, cfg.max_grad_norm)

    return Learner(policy=actor, greedy=actor, update=update)


def make_value_decomposition(cfg: Config, env: PettingZooWrapper) -> Learner:
    """VDN or QMIX: shared Q-network, mixer, masked epsilon-greedy, replay, TD(0)."""
    obs_dim = env.observation_spec[OBS].shape[-1]
    action_spec = env.full_action_spec[GROUP, "action"]
    local = (GROUP, "chosen_action_value")
    qnet = TensorDictSequential(
        TensorDictModule(
            node_policy(cfg, obs_dim, action_spec.space.n),
            in_keys=[OBS],
            out_keys=[(GROUP, "action_value")],
        ),
        QValueModule(
            action_value_key=(GROUP, "action_value"),
            action_mask_key=MASK,
            out_keys=[(GROUP, "action"), (GROUP, "action_value"), local],
            action_space="categorical",
        ),
    )
    explore = EGreedyModule(
        action_spec,
        eps_init=cfg.eps_start,
        eps_end=cfg.eps_end,
        annealing_num_steps=cfg.eps_frames,
        action_key=(GROUP, "action"),
        action_mask_key=MASK,
    )
    if cfg.algorithm == "vdn":
        mixer = TensorDictModule(
            VDNMixer(n_agents=cfg.nodes, device="cpu"),
            in_keys=[local],
            out_keys=["chosen_action_value"],
        )
    else:
        mixer = TensorDictModule(
            QMixer(
                state_shape=env.observation_spec["state"].shape,
                mixing_embed_dim=cfg.mixing_embed,
                n_agents=cfg.nodes,
                device="cpu",
            ),
            in_keys=[local, "state"],
            out_keys=["chosen_action_value"],
        )
    loss = QMixerLoss(qnet, mixer, delay_value=True, action_space="categorical")
    loss.set_keys(
        action_value=(GROUP, "action_value"),
        local_value=local,
        global_value="chosen_action_value",
        action=(GROUP, "action"),
    )
    loss.make_value_estimator(ValueEstimators.TD0, gamma=cfg.gamma)
    target = SoftUpdate(loss, tau=cfg.tau)
    optim = torch.optim.Adam(loss.parameters(), lr=cfg.lr)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(cfg.buffer), batch_size=cfg.minibatch)
    # Not stored: the per-node copies of ``state`` (the root one is kept) and what the
    # Q-network recomputes.
    skip = [
        (GROUP, "observation", "state"),
        ("next", GROUP, "observation", "state"),
        (GROUP, "action_value"),
        local,
    ]

    def update(batch: TensorDictBase) -> None:
        # The team reward, once (every node's copy is the same).
        batch.set(("next", "reward"), batch.get(("next", GROUP, "reward"))[..., 0, :])
        buffer.extend(batch.exclude(*skip).reshape(-1))
        for _ in range(cfg.updates):
            _step(optim, loss.parameters(), loss(buffer.sample())["loss"], cfg.max_grad_norm)
            target.step()
        explore.step(batch.numel())

    return Learner(policy=TensorDictSequential(qnet, explore), greedy=qnet, update=update)


BUILDERS: dict[str, Callable[[Config, PettingZooWrapper], Learner]] = {
    "mappo": make_ppo,
    "ippo": make_ppo,
    "vdn": make_value_decomposition,
    "qmix": make_value_decomposition,
}


def play(env: PettingZooWrapper, log: EpisodeLog, policy: Any, seeds: list[int]) -> list[dict]:
    """:func:`episode_figures` per seed of ``policy`` (greedy; ``None``: uniformly random
    valid actions) on ``env``."""
    start = len(log.episodes)
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        for seed in seeds:
            # Every episode ends (deadlines pass); max_steps is only a bound.
            env.rollout(10**6, policy, tensordict=env.reset(seed=seed), auto_reset=False)
    return log.episodes[start:]


def train(
    cfg: Config, learner: Learner, env: PettingZooWrapper, log: EpisodeLog, evaluate: Callable
) -> tuple[pd.DataFrame, float]:
    """Train until the budget is spent, with a learning-curve point every
    ``cfg.eval_every`` training seconds; returns the curve and the training seconds."""
    collector = Collector(
        env,
        learner.policy,
        frames_per_batch=cfg.frames_per_batch,
        total_frames=-1,
        # The policies are feed-forward: the env needs no transforms (InitTracker etc.).
        auto_register_policy_transforms=False,
    )
    rows: list[dict[str, Any]] = []
    frames, seen, spent, next_point = 0, 0, 0.0, cfg.eval_every

    def point() -> None:
        nonlocal seen
        finished, seen = log.episodes[seen:], len(log.episodes)
        val = evaluate(learner.greedy)
        rows.append(
            {
                "wall_s": spent,
                "frames": frames,
                "ticks": log.ticks,
                "train_episodes": len(finished),
                "train_completion": mean_of(finished),
                "val_completion": val,
            }
        )
        print(f"{spent:7.1f} s  {frames:>8} frames  val completion {val:.3f}", flush=True)

    point()  # the untrained policy
    clock = time.perf_counter()
    for batch in collector:  # collecting the batch is counted: the clock runs
        learner.update(batch)
        frames += batch.numel()
        spent += time.perf_counter() - clock
        done = spent >= cfg.minutes * 60
        if done or spent >= next_point:
            point()  # not counted
            while next_point <= spent:
                next_point += cfg.eval_every
        if done:
            break
        clock = time.perf_counter()
    collector.shutdown()
    return pd.DataFrame(rows), spent


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except where the help says what ``None`` means."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        return action.help if action.default is None else super()._get_help_string(action)


def parse_args(argv: list[str] | None = None) -> Config:
    """The command line: one option per :class:`Config` field, same name with dashes."""
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=_Help,
    )
    for f in dataclasses.fields(Config):
        name = f"--{f.name.replace('_', '-')}"
        if isinstance(f.default, bool):
            p.add_argument(
                name,
                action=argparse.BooleanOptionalAction,
                default=f.default,
                help=f.metadata["help"],
            )
        else:
            choices = {"algorithm": ALGORITHMS, "actor": ACTORS}.get(f.name)
            p.add_argument(
                name,
                type=f.metadata["type"],
                default=f.default,
                choices=choices,
                help=f.metadata["help"],
            )
    args = vars(p.parse_args(argv))
    try:
        return Config(**args)
    except ValueError as exc:
        p.error(str(exc))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """The command line: :func:`run` of :func:`parse_args`."""
    cfg = parse_args(argv)
    with warnings.catch_warnings():
        # TorchRL names the PettingZoo version it tests (1.24.3); this repository tests 1.27.
        warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested")
        return run(cfg)


def run(cfg: Config) -> dict[str, Any]:
    """Train, evaluate next to the schedulers and the random policy, write ``cfg.out``;
    returns the figures (``<name>`` and ``<name>_ci95`` per evaluated policy)."""
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    env, log = make_env(cfg, cfg.train_split, cfg.seed)
    learner = BUILDERS[cfg.algorithm](cfg, env)
    val_env, val_log = make_env(cfg, cfg.eval_split, cfg.eval_seed)
    curve_seeds = cfg.eval_seeds(cfg.curve_episodes)
    curve, train_s = train(
        cfg, learner, env, log, lambda policy: mean_of(play(val_env, val_log, policy, curve_seeds))
    )

    seeds = cfg.eval_seeds(cfg.episodes)
    episodes = {
        cfg.algorithm: play(val_env, val_log, learner.greedy, seeds),
        "random_actions": play(val_env, val_log, None, seeds),
        **reference_episodes(cfg.env_kwargs(cfg.eval_split), seeds),
    }
    result: dict[str, Any] = {
        "frames": int(curve["frames"].iloc[-1]),
        "ticks": int(curve["ticks"].iloc[-1]),
        "train_seconds": train_s,
        **completion_summary(episodes),
        **paired_leads(episodes, cfg.algorithm),
    }
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    curve.to_csv(out / "curve.csv", index=False)
    torch.save(learner.greedy.state_dict(), out / "policy.pt")
    (out / "result.json").write_text(
        json.dumps(
            {
                "config": dataclasses.asdict(cfg),
                **result,
                "seeds": seeds,
                # per policy, each seed's completion rate: pair them anew with any policy
                "completions": {n: [e["completion"] for e in eps] for n, eps in episodes.items()},
            },
            indent=2,
        )
    )
    print(
        f"{cfg.algorithm}{' (stay)' if cfg.stay else ''}: trained {result['frames']} frames "
        f"({result['ticks']} ticks) in {train_s:.0f} s; {cfg.episodes} greedy episodes on "
        f"split {cfg.eval_split!r} (N={cfg.nodes}, K={cfg.slots}, load={cfg.load}); {out}"
    )
    print(f"  {'':<15} {'completion rate':>15}  moves/tick  idled/tick  bumped/tick")
    for n in episodes:
        print(
            f"  {n:<15} {result[n]:>7.3f} ± {result[f'{n}_ci95']:.3f}  "
            f"{result[f'{n}_moves_per_tick']:>10.2f}  {result[f'{n}_idled_per_tick']:>10.2f}  "
            f"{result[f'{n}_bumped_per_tick']:>11.2f}"
        )
    print("\n".join(lead_lines(result, cfg.algorithm)))
    return result


if __name__ == "__main__":
    main()
