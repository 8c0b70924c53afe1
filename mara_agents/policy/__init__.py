"""The policy runtime (torch, no ray): the network, whole-round decoding, policy files.

* :mod:`~mara_agents.policy.network`: ``MaraNet`` and its ``ModelConfig``;
* :mod:`~mara_agents.policy.rounds`: a round decoded node after node, teacher forcing,
  the critic once per round;
* :mod:`~mara_agents.policy.runtime`: policy files (``load_policy``, ``save_policy``) and
  the harness's ``MaraAgent``.
"""
