"""Torch-only policy files: export from an RLlib checkpoint, load and act without a Ray runtime.

A policy file is ``torch.save`` of a plain dict::

    {"format": "mara-policy", "version": 2,
     "layout": {...ObsLayout...}, "model": {...ModelConfig...},
     "env": {...ClusterConfig the policy was trained on...},
     "wrapper": "none" | "flow" | "wls", "wrapper_options": {...},
     "state_dict": {...MaraNet weights...}, "source": "<checkpoint path>"}

:func:`load_policy` rebuilds :class:`~mara_agents.rl_module.MaraNet` from it;
:class:`MaraPolicy` acts on one observation dict, :class:`MaraAgent` drives the
PettingZoo env for the evaluation harness (``reset(env, seed)`` / ``act(env, agent)``).
"""

from __future__ import annotations

import hashlib
import pickle
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mara_agents.experiment import Experiment
from mara_agents.numpy_actor import NumpyActor
from mara_agents.rl_module import (
    SHARED_MODULE_ID,
    MaraNet,
    ModelConfig,
    ObsLayout,
    model_config_from,
)
from mara_agents.rllib_env import wrap
from mara_env.cluster_env import QUEUE_FEATURES

FORMAT = "mara-policy"
# 2: the env's slot rows gained nodes_pending and the wrapper's pred_share (v1 files, whose
# observations lack them, cannot run in the current env).
VERSION = 2
SHIPPED_POLICY = Path(__file__).parent / "policies" / "mara_v3.pt"


class PolicyFileError(ValueError):
    """A file is not a MARA policy, or has an unsupported version."""


def _module_dir(checkpoint: Path) -> Path:
    """The shared module's directory inside an algorithm (or module) checkpoint."""
    for cand in (
        checkpoint / "learner_group" / "learner" / "rl_module" / SHARED_MODULE_ID,
        checkpoint / "rl_module" / SHARED_MODULE_ID,
        checkpoint / SHARED_MODULE_ID,
        checkpoint,
    ):
        if (cand / "module_state.pkl").is_file() and (cand / "class_and_ctor_args.pkl").is_file():
            return cand
    raise FileNotFoundError(
        f"{checkpoint}: no RLlib checkpoint of module {SHARED_MODULE_ID!r} found "
        "(expected learner_group/learner/rl_module/shared/module_state.pkl)"
    )


def _env_of(checkpoint: Path) -> dict[str, Any]:
    """The env_config the run used (from the trial's params.pkl next to the checkpoint)."""
    params = checkpoint.parent / "params.pkl"
    if not params.is_file():
        return {}
    with params.open("rb") as f:
        config = pickle.load(f)
    env_config = config.get("env_config", {}) if isinstance(config, dict) else config.env_config
    return dict(env_config or {})


def export_checkpoint(checkpoint: str | Path, out: str | Path) -> Path:
    """Write the shared module of an RLlib checkpoint as a torch-only policy file."""
    checkpoint = Path(checkpoint).resolve()
    mdir = _module_dir(checkpoint)
    with (mdir / "class_and_ctor_args.pkl").open("rb") as f:
        kwargs = pickle.load(f)["ctor_args_and_kwargs"][1]
    with (mdir / "module_state.pkl").open("rb") as f:
        state = pickle.load(f)
    space = kwargs["observation_space"]
    layout = ObsLayout.infer(
        space["observation"].shape[0], space["state"].shape[0], int(kwargs["action_space"].n)
    )
    config = model_config_from(kwargs["model_config"])
    net = MaraNet(layout, config)
    net.load_state_dict(
        {k.removeprefix("net."): torch.as_tensor(np.asarray(v)) for k, v in state.items()}
    )
    return save_policy(net, out, _env_of(checkpoint), source=str(checkpoint))


def export_warm_start(weights: str | Path, exp: Experiment, out: str | Path) -> Path:
    """Write a behaviour-cloning warm start (``OUT/<name>_pretrain.pt``) as a policy file."""
    state = torch.load(weights, map_location="cpu", weights_only=True)
    k = exp.env.num_slots
    node_dim, slot_dim = state["node_enc.0.weight"].shape[1], state["slot_enc.0.weight"].shape[1]
    obs_dim = node_dim + k * slot_dim
    layout = ObsLayout.infer(obs_dim, obs_dim + len(QUEUE_FEATURES), k + 1)
    net = MaraNet(layout, model_config_from(exp.model))
    net.load_state_dict(state)
    return save_policy(net, out, exp.env_config(), source=f"{Path(weights).resolve()} (warm start)")


def save_policy(
    net: MaraNet, out: str | Path, env_config: dict[str, Any], source: str = ""
) -> Path:
    """Write ``net`` as a policy file; ``env_config`` as given to the RLlib env creator."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "format": FORMAT,
            "version": VERSION,
            "layout": asdict(net.layout),
            "model": asdict(net.config),
            "env": env_config.get("cluster", {}),
            "wrapper": env_config.get("wrapper", "none"),
            "wrapper_options": env_config.get("wrapper_options", {}),
            "state_dict": net.state_dict(),
            "source": source,
            "predictor_sha256": _predictor_digest(env_config),
        },
        out,
    )
    return out


def _predictor_digest(env_config: dict[str, Any]) -> str | None:
    """SHA-256 of the flow checkpoint the features come from (None without flow features)."""
    if env_config.get("wrapper", "none") != "flow":
        return None
    from flow_predictor.checkpoint import SHIPPED_CHECKPOINT

    path = (env_config.get("wrapper_options") or {}).get("path") or SHIPPED_CHECKPOINT
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class MaraPolicy:
    """A loaded policy: ``act(obs) -> action`` for one node's observation dict."""

    def __init__(self, net: MaraNet, meta: dict[str, Any], seed: int | None = None) -> None:
        self.net = net.eval()
        # one observation per call: numpy is faster; a copy of the weights as loaded
        self.actor = NumpyActor(self.net)
        self.meta = meta
        self.generator = torch.Generator().manual_seed(0 if seed is None else seed)

    @property
    def wrapper(self) -> str:
        return self.meta.get("wrapper", "none")

    def seed(self, seed: int) -> None:
        """Reseed the sampling generator (only used with ``greedy=False``)."""
        self.generator.manual_seed(seed)

    def logits(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """Masked logits ``(K + 1,)`` of one observation dict (numpy; same as ``net.logits``)."""
        x = np.asarray(obs["observation"], np.float32)
        lay = self.net.layout
        if x.shape != (lay.obs_dim,):
            raise ValueError(
                f"observation has shape {x.shape}; this policy expects ({lay.obs_dim},) "
                f"({lay.node_dim} node features + {lay.num_slots} slots x {lay.slot_dim}, "
                f"wrapper={self.wrapper!r}): build the env with num_slots={lay.num_slots}"
            )
        return self.actor.logits(x, obs["action_mask"])

    def act(self, obs: dict[str, np.ndarray], greedy: bool = True) -> int:
        """Action for one observation: argmax (default) or a sample from the seeded generator."""
        logits = self.logits(obs)
        if greedy:
            return int(logits.argmax())
        probs = torch.softmax(torch.from_numpy(logits), -1)
        return int(torch.multinomial(probs, 1, generator=self.generator))


def load_policy(path: str | Path = SHIPPED_POLICY, seed: int | None = None) -> MaraPolicy:
    """Load a policy file written by :func:`export_checkpoint` (default: the shipped one)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"policy file {str(path)!r} does not exist")
    data = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise PolicyFileError(f"{path}: not a MARA policy file (no {FORMAT!r} header)")
    if data.get("version") != VERSION:
        raise PolicyFileError(
            f"{path}: policy file version {data.get('version')}; expected {VERSION} "
            "(version 1 files were trained on an observation layout without the "
            "nodes_pending and pred_share features: retrain or export again)"
        )
    net = MaraNet(ObsLayout.from_dict(data["layout"]), ModelConfig(**data["model"]))
    net.load_state_dict(data["state_dict"])
    meta = {k: v for k, v in data.items() if k != "state_dict"}
    return MaraPolicy(net, meta, seed)


class MaraAgent:
    """Env-driven agent for the evaluation harness: ``reset(env, seed)``, ``act(env, agent)``.

    ``env`` is the AEC env the harness steps; when the policy was trained with predictor
    features, the agent observes through its own copy of the same observation wrapper.
    """

    def __init__(
        self, policy: MaraPolicy | str | Path = SHIPPED_POLICY, greedy: bool = True
    ) -> None:
        self.policy = policy if isinstance(policy, MaraPolicy) else load_policy(policy)
        # One observation per call: intra-op threads only add overhead (and contention
        # with the harness's other worker processes).
        torch.set_num_threads(1)
        self.greedy = greedy
        self.name = "mara"
        # the harness builds this agent's env with the slot count the policy was trained on
        self.num_slots = self.policy.net.layout.num_slots
        self._view: Any = None
        self._checked = False

    def reset(self, env: Any, seed: int) -> None:
        """Call right after ``env.reset(seed=seed)``."""
        self.policy.seed(seed)
        meta = self.policy.meta
        if meta.get("predictor_sha256") and not self._checked:
            self._checked = True
            if _predictor_digest(meta) != meta["predictor_sha256"]:
                warnings.warn(
                    "the flow-predictor checkpoint differs from the one this policy was "
                    "trained with: its observation features may have shifted",
                    stacklevel=2,
                )
        # A fresh view per episode: the wrapper caches predictions per task.
        self._view = wrap(env, self.policy.wrapper, self.policy.meta.get("wrapper_options"))

    def act(self, env: Any, agent: str) -> int:
        """The action of ``agent`` (the env's current agent)."""
        return self.policy.act(self._view.observe(agent), greedy=self.greedy)


def make_agent(arg: str = "") -> MaraAgent:
    """Harness factory for ``mara=POLICY.pt`` (empty ``POLICY.pt``: the shipped policy)."""
    return MaraAgent(arg or SHIPPED_POLICY)
