"""Training on RLlib (ray and torch): experiment YAMLs, behaviour cloning, PPO, export.

Importing this package loads nothing; ray enters with the modules that use it
(``rllib_env``, ``rl_module``, ``ppo``, ``group``, ``train``, ``curves``, ``export``).
``experiment`` (with ``rules``, ``bases`` and ``records``) and ``clone`` work without
ray, so cloning a scheduler needs only torch.
"""
