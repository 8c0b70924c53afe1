"""Baseline schedulers, one module per family, and the registry of every built-in one.

* :mod:`~mara_agents.baselines.lara`: LARA (ICML 2024) and the oracle (LARA's planner on
  exact work);
* :mod:`~mara_agents.baselines.laira`: LaiRA (AAAI 2026), LARA's successor;
* :mod:`~mara_agents.baselines.greedy`: least slack first and Optimus' marginal gain;
* :mod:`~mara_agents.baselines.fifo`, :mod:`~mara_agents.baselines.tiresias`,
  :mod:`~mara_agents.baselines.elasticflow`: FIFO with gang allocation and backfill,
  Tiresias' 2D-LAS (NSDI 2019), ElasticFlow (ASPLOS 2023);
* :mod:`~mara_agents.baselines.hedge`: hedge, a greedy knapsack on chances of finishing
  from a remaining-work distribution (the flow model's fused with what deadlines say about
  size, or either alone), and its exact-work twin;
* :mod:`~mara_agents.baselines.lookahead`: hedge's plan against a few alternatives, each
  rolled forward with hedge on sampled futures (a rollout teacher, not an online scheduler);
* :mod:`~mara_agents.baselines.flow_share`: flow_share (the share rule of
  :mod:`mara_agents.planning.share_rule` with a remaining-work predictor), and the textbook rules of
  :mod:`mara_env.schedulers` (EDF, uniform share, random).

Nothing here imports torch or ray (a test checks it): a scheduler that needs a model
loads it when it first runs.
"""

from __future__ import annotations

from mara_agents.baselines.elasticflow import ElasticFlow
from mara_agents.baselines.fifo import FIFO
from mara_agents.baselines.flow_share import FlowShare
from mara_agents.baselines.greedy import LeastSlack, Optimus
from mara_agents.baselines.hedge import Hedge
from mara_agents.baselines.laira import LaiRA
from mara_agents.baselines.lara import LARA, Oracle
from mara_agents.baselines.lookahead import Lookahead
from mara_agents.baselines.tiresias import Tiresias
from mara_env.schedulers import SCHEDULERS, Scheduler

ALL_SCHEDULERS: dict[str, type[Scheduler]] = {
    **SCHEDULERS,
    LARA.name: LARA,
    Oracle.name: Oracle,
    LaiRA.name: LaiRA,
    LeastSlack.name: LeastSlack,
    Optimus.name: Optimus,
    FlowShare.name: FlowShare,
    FIFO.name: FIFO,
    Tiresias.name: Tiresias,
    ElasticFlow.name: ElasticFlow,
    Hedge.name: Hedge,
    Lookahead.name: Lookahead,
}
