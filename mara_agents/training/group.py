"""Group-relative advantages: episodes that share a workload are each other's baseline.

In this scheduling problem most of the spread of an episode's return comes from its
workload (which tasks arrive, when, and how hard they are), not from the policy's choices;
a critic that cannot foresee arrivals leaves that spread in every GAE advantage.  With
``advantage: {estimator: group | group_gae, group_size: G}`` (round view only):

* :class:`GroupedEnvRunner` resets its ``num_envs_per_env_runner`` envs in groups of ``G``
  that share a seed, so the ``G`` episodes of a group run the same workload at the same
  load and differ only in the policy's samples.  Every sample call draws fresh seeds from
  ``(experiment seed, runner index, call number)``: runs repeat with their seed.  Sampling
  runs whole episodes (``batch_mode: complete_episodes``).
* :class:`GroupRelativeAdvantages` (the learner connector that replaces RLlib's GAE)
  gives step ``t`` of an episode the advantage ``x_t - b_t``, where ``b_t`` is the mean
  of ``x_t`` over the *other* episodes of its group (leave-one-out, as RLOO; an episode
  that already ended counts 0) and ``x_t`` is

  - ``group``: the undiscounted return from ``t`` on, ``G_t`` (the critic regresses on it);
  - ``group_gae``: RLlib's GAE advantage with the critic (``gamma``, ``lambda_``): credit
    stays local in time, and the shocks every episode of the group shares at step ``t``
    (the same task arrives, the same deadline passes) cancel (the critic regresses on the
    GAE targets).

  The other episodes were sampled independently of this one's actions, so the baseline
  keeps the policy gradient unbiased while it removes what the shared workload explains.
  An episode without a complete group mate in the batch (a second episode an env finished
  during the same call, unseeded) falls back to ``b_t = V(s_t)`` (``group``) or to plain
  GAE (``group_gae``).  Advantages are standardised over the batch, as RLlib's GAE does.

The group's episodes are found by the ``workload_seed`` in their reset info
(:class:`mara_env.round_env.MixedRoundEnv` and :class:`mara_env.round_env.RoundEnv`
report the seed of a seeded reset).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
from ray.rllib.connectors.common.numpy_to_tensor import NumpyToTensor
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.numpy import convert_to_numpy
from ray.rllib.utils.postprocessing.value_predictions import compute_value_targets

from mara_env.round_env import WORKLOAD_SEED

SEED_KEY = WORKLOAD_SEED  # reset info of a seeded reset: the seed (the group's key)
# learner_config_dict keys read by the runner and the learner: the estimator and group size
ESTIMATOR_KEY, GROUP_SIZE_KEY = "advantage", "group_size"
BASELINES = {"group": "returns", "group_gae": "gae"}  # estimator -> what is compared


def group_size(config: Any) -> int:
    """The group size an algorithm config asks for (0: RLlib's GAE, no groups)."""
    settings = config.learner_config_dict or {}
    return int(settings.get(GROUP_SIZE_KEY, 0)) if settings.get(ESTIMATOR_KEY) in BASELINES else 0


def group_seeds(root: int, runner: int, call: int, num_envs: int, size: int) -> list[int]:
    """Seeds of one sample call's resets: ``num_envs // size`` groups of ``size`` equal seeds.

    The seeds depend only on ``(root, runner, call)``; different groups get different seeds.
    """
    if size < 1 or num_envs % size:
        raise ValueError(f"{num_envs} envs do not split into groups of {size}")
    state = np.random.SeedSequence([root, runner, call]).generate_state(num_envs // size)
    return [int(state[i // size]) for i in range(num_envs)]


class GroupedEnvRunner(SingleAgentEnvRunner):
    """A single-agent env runner whose resets seed its envs in groups (see module doc)."""

    def __init__(self, *, config: Any, **kwargs: Any) -> None:
        super().__init__(config=config, **kwargs)
        self._group = group_size(config)
        self._root = int(config.seed) if config.seed is not None else None
        if self._root is None:  # unseeded run: fresh entropy, groups all the same
            self._root = int(np.random.SeedSequence().generate_state(1)[0])
        self._calls = 0

    def _try_env_reset(self, *, seed: Any = None, options: dict | None = None) -> Any:
        # RLlib resets every env at each complete-episodes sample call (with the runner's
        # fixed seed, which would repeat the same episodes): seed them in fresh groups.
        if self._group:
            self._calls += 1
            worker = int(self.worker_index or 0)
            seed = group_seeds(self._root, worker, self._calls, self.num_envs, self._group)
        return super()._try_env_reset(seed=seed, options=options)


def returns_to_go(rewards: np.ndarray) -> np.ndarray:
    """Undiscounted return from each step on (gamma = 1)."""
    return np.cumsum(rewards[::-1])[::-1]


def _groups(keys: list[Any]) -> list[list[int]]:
    """Indices of the episodes of each group that has two or more (key ``None``: none)."""
    members: dict[Any, list[int]] = defaultdict(list)
    for e, key in enumerate(keys):
        if key is not None:
            members[key].append(e)
    return [group for group in members.values() if len(group) > 1]


def group_baselines(values: list[np.ndarray], keys: list[Any]) -> list[np.ndarray | None]:
    """Per episode, the leave-one-out mean of its group mates' values at each step.

    ``values[e]``: episode ``e``'s per-step values (returns-to-go or GAE advantages);
    ``keys[e]``: its group (``None``: none).  Past its end an episode's value is 0.
    ``None`` for an episode without a mate.
    """
    out: list[np.ndarray | None] = [None] * len(values)
    for group in _groups(keys):
        total = np.zeros(max(len(values[e]) for e in group))
        for e in group:
            total[: len(values[e])] += values[e]
        for e in group:
            out[e] = (total[: len(values[e])] - values[e]) / (len(group) - 1)
    return out


def return_spread(returns: list[np.ndarray], keys: list[Any]) -> dict[str, float]:
    """Standard deviation of the episodes' returns, overall and within their groups (pooled):
    how much of the spread the shared workload explains."""
    first = np.array([g[0] for g in returns]) if returns else np.zeros(0)
    groups = [first[group] for group in _groups(keys)]
    dev = sum(((v - v.mean()) ** 2).sum() for v in groups)
    dof = sum(len(v) - 1 for v in groups)
    return {
        "return_std": float(first.std()) if len(first) > 1 else float("nan"),
        "return_std_in_group": float(np.sqrt(dev / dof)) if dof else float("nan"),
    }


class GroupRelativeAdvantages(ConnectorV2):
    """Learner connector: advantages against the group mates' (module doc).

    ``compare``: ``returns`` (estimator ``group``) or ``gae`` (``group_gae``, with
    ``gamma`` and ``lambda_``).  Same place and outputs as RLlib's
    ``GeneralAdvantageEstimation`` (last piece of the learner pipeline, episodes extended
    by one artificial step).
    """

    def __init__(
        self,
        input_observation_space: Any = None,
        input_action_space: Any = None,
        *,
        compare: str = "returns",
        gamma: float = 1.0,
        lambda_: float = 1.0,
    ):
        super().__init__(input_observation_space, input_action_space)
        if compare not in BASELINES.values():
            raise ValueError(f"compare={compare!r}: expected one of {list(BASELINES.values())}")
        self.compare, self.gamma, self.lambda_ = compare, gamma, lambda_
        self._to_tensor: NumpyToTensor | None = None
        self.fallback_fraction = 0.0  # of the last batch's steps: no group mate

    def __call__(
        self,
        *,
        rl_module: Any,
        episodes: list[Any],
        batch: dict,
        metrics: Any = None,
        **kwargs: Any,
    ):
        sa_episodes = list(self.single_agent_episode_iterator(episodes, False))
        device = None
        done = {}
        for mid, module in rl_module.items():
            if mid not in batch or not isinstance(module, ValueFunctionAPI):
                continue
            if module.is_stateful():
                raise ValueError(f"{type(self).__name__}: stateful module {mid!r} not supported")
            column = batch[mid]
            values = module.compute_values(column)
            device = values.device
            values = convert_to_numpy(values)
            reward = convert_to_numpy(column[Columns.REWARDS])
            mine = [e for e in sa_episodes if e.module_id in (None, mid)]
            lens = [len(e) for e in mine]
            cuts = np.cumsum(lens)[:-1]
            returns = [returns_to_go(np.asarray(r, np.float64)) for r in np.split(reward, cuts)]
            keys = [e.get_infos(0).get(SEED_KEY) if e.t_started == 0 else None for e in mine]
            parts = np.split(values, cuts)
            if self.compare == "returns":
                own, fallback, targets = returns, parts, returns
            else:
                gae_targets = compute_value_targets(
                    values=values,
                    rewards=reward,
                    terminateds=convert_to_numpy(column[Columns.TERMINATEDS]),
                    truncateds=convert_to_numpy(column[Columns.TRUNCATEDS]),
                    gamma=self.gamma,
                    lambda_=self.lambda_,
                )
                targets = np.split(gae_targets, cuts)
                own = [t - v for t, v in zip(targets, parts)]
                fallback = [np.zeros_like(v) for v in parts]
            baselines = group_baselines(own, keys)
            advantages = np.concatenate(
                [x - (b if b is not None else f) for x, b, f in zip(own, baselines, fallback)]
            )
            alone = sum(n for n, b in zip(lens, baselines) if b is None)
            self.fallback_fraction = alone / max(sum(lens), 1)
            if metrics is not None:
                stats = {"group_fallback": self.fallback_fraction, **return_spread(returns, keys)}
                for name, value in stats.items():
                    metrics.log_value((mid, name), value, window=1)
            advantages = (advantages - advantages.mean()) / max(1e-4, advantages.std())
            done[mid] = {
                Postprocessing.ADVANTAGES: advantages.astype(np.float32),
                Postprocessing.VALUE_TARGETS: np.concatenate(targets).astype(np.float32),
            }
        if done:
            if self._to_tensor is None:
                self._to_tensor = NumpyToTensor(as_learner_connector=True, device=device)
            tensors = self._to_tensor(rl_module=rl_module, batch=done, episodes=episodes)
            for mid, columns in tensors.items():
                batch[mid].update(columns)
        return batch
