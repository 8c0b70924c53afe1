"""The policy runtime (torch, no ray): the network, whole-round decoding, policy files.

* :mod:`~mara_agents.policy.network`: ``MaraNet`` and its ``ModelConfig``;
* :mod:`~mara_agents.policy.rounds`: a round decoded node after node, teacher forcing,
  the critic once per round;
* :mod:`~mara_agents.policy.policy_file`: the policy file format (``save_policy``,
  ``read_policy``) and its checks;
* :mod:`~mara_agents.policy.inference`: acting with a loaded policy (``load_policy``,
  ``MaraPolicy``);
* :mod:`~mara_agents.policy.agent`: the evaluation harness's ``MaraAgent``.
"""
