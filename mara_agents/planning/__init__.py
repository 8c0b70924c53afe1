"""Planners: the rules that turn remaining-work predictions into node counts.

Each rule sits beside its ``*Params`` (the knobs a spec sets, each with its range):

* :mod:`~mara_agents.planning.share_rule`: flow_share's want and count (``FlowShareParams``);
* :mod:`~mara_agents.planning.hedge_rule`: hedge's chances of finishing and its greedy
  knapsack on them (``HedgeParams``).

Beside them, :mod:`~mara_agents.planning.history`: what a cluster's history says
(:class:`~mara_agents.planning.history.ClusterHistory`: the deadline prior fitted on it and
the price of a miss tuned on it), built once per run and handed to the planners, and
:mod:`~mara_agents.planning.specs`: the spec grammar's values, for schedulers and teachers.

The schedulers of :mod:`mara_agents.baselines` act on them; the policy's plan features
(:mod:`mara_agents.policy.features`) read one of them, named by a scheduler spec.  Numpy
only (compiled with numba where installed): no torch, no ray.
"""
