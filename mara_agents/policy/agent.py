"""The learned policy as an agent of the evaluation harness (torch, no ray).

:class:`MaraAgent` drives the AEC env the harness steps, observing it through its own copy
of the predictor wrapper the policy was trained with (the settings its file records);
:func:`make_agent`, :func:`check_policy` and :func:`size_note` are what the harness's
registry calls for ``mara=POLICY.pt`` specs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from flow_predictor.remaining import FLOW_SAMPLES
from flow_predictor.wrapper import CLUSTER_CHOICE
from mara_agents.planning.history import ClusterHistory, history_key
from mara_agents.policy.features import (
    FeatureSettings,
    TeacherPlan,
    history_fields,
    policy_predictor,
    prior_fields,
    wrap,
)
from mara_agents.policy.inference import MaraPolicy, load_policy, slots_for
from mara_agents.policy.policy_file import SHIPPED_POLICY, read_policy, trained_nodes
from mara_env.config import ClusterConfig
from mara_env.threads import single_threaded


class MaraAgent:
    """The learned policy as the harness's :class:`~mara_agents.evaluation.registry.Agent`:
    ``reset(env, seed)``, then ``act_round(env)`` once per round (or ``act(env, agent)``
    node by node).

    ``env`` is the AEC env the harness steps; when the policy was trained with predictor
    features, the agent observes through its own copy of the same observation wrapper,
    whose predictor it builds once.  It decodes all ``N`` nodes' actions of a round from
    the round's observation (:class:`~mara_env.round_env.RoundEnv`'s view of the same env,
    one slot encoding per round); :meth:`act` hands them out node by node.  They are the
    actions the policy gives each node's own observation (tested).  Build one agent and
    reset it for every episode: the policy file and the flow checkpoint are read once.

    On a cluster of another size it observes :meth:`slots_for` ``(N)`` slots (the harness
    builds the env so), acting with the trained weights on as many slots as the env has.
    On a cluster whose users are not those it was trained among (other history settings,
    such as another deadline model), its features read the deadline prior of that
    cluster's own history, as ``hedge`` does: the history handed in (:meth:`use_history`)
    by whoever runs the episodes, else the one each episode's cluster has.
    """

    def __init__(
        self, policy: MaraPolicy | str | Path = SHIPPED_POLICY, greedy: bool = True
    ) -> None:
        self.policy = policy if isinstance(policy, MaraPolicy) else load_policy(policy)
        self.greedy = greedy
        self.name = "mara"
        self._trained = self.policy  # the trained slot count; reset acts with the env's
        features = self.policy.features
        samples = FLOW_SAMPLES if features is None else features.samples
        self._predictor = policy_predictor(self.policy.wrapper, self._wrapper_options, samples)
        self._rounds: Any = None
        self._index: dict[str, int] = {}
        self._actions: list[int] = []
        # the feature settings on each cluster's history (its key) and workload acted on so far
        self._on_cluster: dict[tuple[str, str], FeatureSettings] = {}
        self.history: ClusterHistory | None = None

    @property
    def reads_history(self) -> bool:
        """Whether its features read the cluster's history (a deadline prior)."""
        features = self.policy.features
        return features is not None and bool(features.deadline_prior)

    @property
    def needs_tuning(self) -> bool:
        """Whether its features read the cluster's tuning: its teacher's price of a miss,
        or its choice of distribution (the ``cluster`` wrapper)."""
        features = self.policy.features
        if features is None:
            return False
        priced = TeacherPlan.from_spec(features.teacher).prices_by_cluster
        return priced or self.policy.wrapper == CLUSTER_CHOICE

    def use_history(self, history: ClusterHistory) -> None:
        """Act with ``history`` (built once by whoever runs the episodes) from the next
        episode on."""
        self.history = history

    @property
    def _wrapper_options(self) -> dict[str, Any] | None:
        return self.policy.meta.get("wrapper_options")

    def slots_for(self, num_nodes: int) -> int:
        """The slot count the harness builds the env of a ``num_nodes`` cluster with."""
        return self._trained.slots_for(num_nodes)

    def reset(self, env: Any, seed: int) -> None:
        """Call right after ``env.reset(seed=seed)``; acts with as many slots as ``env`` has
        (the trained weights, :meth:`MaraPolicy.with_slots`)."""
        from mara_env.round_env import RoundEnv

        k = env.unwrapped.engine.config.num_slots
        if k != self.policy.net.layout.num_slots:
            self.policy = self._trained.with_slots(k)
        self.policy.seed(seed)
        # A fresh view per episode (the wrapper caches predictions per task), around the
        # predictor built once.
        policy = self.policy
        features = self._features_on(env.unwrapped.engine.config)
        view = wrap(env, policy.wrapper, self._wrapper_options, self._predictor, features)
        self._rounds = RoundEnv(view)
        self._index = {a: i for i, a in enumerate(self._rounds.engine.agents)}
        self._actions = []

    def _features_on(self, config: ClusterConfig) -> FeatureSettings | None:
        """The policy's feature settings on ``config``'s cluster and workload: those it was
        trained with where the cluster's history settings are those of its training env,
        else with the deadline prior of the cluster's history
        (:attr:`ClusterHistory.prior`) and, where its teacher prices a miss by that
        history, its price; a ``cluster``-wrapper policy reads the distribution that
        history chose for the workload."""
        features = self.policy.features
        if features is None or not features.deadline_prior:
            return features
        key, jobs = history_key(config), config.jobs or "none"
        if (key, jobs) not in self._on_cluster:
            trained = ClusterConfig.from_dict(dict(self.policy.meta.get("env") or {}))
            own = key == history_key(trained)  # the settings it was trained among
            fields: dict[str, Any] = {}
            if not own or self.policy.wrapper == CLUSTER_CHOICE:
                history = self.history
                if history is None:
                    history = ClusterHistory.of(config)
                elif history.key != key:
                    raise ValueError(
                        f"mara: handed the history of cluster {history.key}, but the episode "
                        f"runs on {key}"
                    )
                teacher = TeacherPlan.from_spec(features.teacher)
                fields = history_fields(teacher, history, self.policy.wrapper, jobs)
                if own:  # its prior and price as recorded; only the workload's choice read
                    fields = {"task_work": fields["task_work"]}
                else:
                    fields.update(prior_fields(history.prior))
            # the recorded settings themselves where nothing differs
            fields = {k: v for k, v in fields.items() if getattr(features, k) != v}
            self._on_cluster[key, jobs] = (
                dataclasses.replace(features, **fields) if fields else features
            )
        return self._on_cluster[key, jobs]

    def act_round(self, env: Any) -> np.ndarray:
        """The ``N`` node actions of the round ``env`` is at the start of."""
        with single_threaded():
            return self.policy.act_round(self._rounds.observe(), greedy=self.greedy)

    def act(self, env: Any, agent: str) -> int:
        """The action of ``agent`` (the env's current agent)."""
        i = self._index[agent]
        if i == 0:
            self._actions = self.act_round(env).tolist()
        return int(self._actions[i])


def make_agent(arg: str = "") -> MaraAgent:
    """Harness factory for ``mara=POLICY.pt`` (empty ``POLICY.pt``: the shipped policy)."""
    return MaraAgent(arg or SHIPPED_POLICY)


def check_policy(arg: str = "") -> None:
    """Raise :class:`PolicyFileError` now if ``mara=ARG`` names no usable policy file."""
    load_policy(arg or SHIPPED_POLICY)


def size_note(arg: str, config: ClusterConfig) -> str | None:
    """One line for a run of ``mara=ARG`` at a cluster size the policy was not trained and
    validated for (None at its trained size)."""
    path = Path(arg or SHIPPED_POLICY)
    data = read_policy(path)
    n_train, k_train = trained_nodes(data), int(data["layout"]["num_slots"])
    n = config.num_nodes
    if n == n_train:
        return None
    k = slots_for(k_train, n_train, n)
    return (
        f"policy {path.name} was trained and validated on N={n_train} nodes with K={k_train} "
        f"slots; running it on N={n} nodes with K={k} slots, a size it was not trained for"
    )
