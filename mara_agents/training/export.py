"""Export a trained policy to a policy file: from an RLlib checkpoint or a warm start.

The file format, its loader and the runtime that acts with it are in
:mod:`mara_agents.policy.policy_file` (torch only); this module reads RLlib's checkpoint layout.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from mara_agents.policy.network import MaraNet, ObsLayout, model_config_from
from mara_agents.policy.policy_file import save_policy
from mara_agents.training.experiment import Experiment
from mara_agents.training.privileged import privileged_widths
from mara_agents.training.rl_module import SHARED_MODULE_ID, round_layout
from mara_env.engine import QUEUE_FEATURES

# The weights a warm start's layout is read from (export_warm_start)
WARM_START_KEYS = ("node_enc.0.weight", "critic_slot.0.weight")


def _module_dir(checkpoint: Path) -> Path:
    """The policy module's directory inside an algorithm (or module) checkpoint: the
    shared module of the node view, or the single module of the round view."""
    modules = checkpoint / "learner_group" / "learner" / "rl_module"
    for cand in (
        modules / SHARED_MODULE_ID,
        modules / DEFAULT_MODULE_ID,
        checkpoint / "rl_module" / SHARED_MODULE_ID,
        checkpoint / "rl_module" / DEFAULT_MODULE_ID,
        checkpoint / SHARED_MODULE_ID,
        checkpoint,
    ):
        if all((cand / name).is_file() for name in MODULE_FILES):
            return cand
        if any((cand / name).is_file() for name in MODULE_FILES):  # one of the two
            missing = next(name for name in MODULE_FILES if not (cand / name).is_file())
            raise FileNotFoundError(
                f"{cand}: no {missing} beside {next(n for n in MODULE_FILES if n != missing)}; "
                "expected both files of an RLlib module checkpoint"
            )
    raise FileNotFoundError(
        f"{checkpoint}: no RLlib checkpoint of module {SHARED_MODULE_ID!r} or "
        f"{DEFAULT_MODULE_ID!r} found (expected learner_group/learner/rl_module/"
        f"{SHARED_MODULE_ID}/module_state.pkl)"
    )


# The two files of an RLlib module checkpoint
MODULE_FILES = ("class_and_ctor_args.pkl", "module_state.pkl")

# Where names that runs pickled have moved since: train.py was split by job
# (MaraMetrics and policy_mapping_fn went to ppo.py), then mara_agents was split into rooms.
MOVED = {
    ("mara_agents.train", "MaraMetrics"): "mara_agents.training.ppo",
    ("mara_agents.train", "policy_mapping_fn"): "mara_agents.training.ppo",
}
MOVED_MODULES = {
    f"mara_agents.{name}": f"mara_agents.training.{name}"
    for name in ("ppo", "group", "rl_module", "rllib_env", "curves", "train", "clone")
} | {
    "mara_agents.network": "mara_agents.policy.network",
    "mara_agents.policy": "mara_agents.policy.policy_file",
}


class _Unpickler(pickle.Unpickler):
    """Reads params.pkl of runs made before a name moved (:data:`MOVED`, :data:`MOVED_MODULES`)."""

    def find_class(self, module: str, name: str) -> Any:
        moved = MOVED.get((module, name)) or MOVED_MODULES.get(module, module)
        return super().find_class(moved, name)


def _read(path: Path, read: Callable[[Any], Any]) -> Any:
    """``read`` of the pickle at ``path``; :class:`PolicyFileError` naming it when it is
    not one of the shape RLlib writes (junk, truncated, another kind)."""
    from mara_agents.policy.policy_file import PolicyFileError

    try:
        with path.open("rb") as f:
            return read(_Unpickler(f).load())
    except Exception as exc:  # junk makes pickle raise many kinds; a wrong shape, Key/TypeError
        raise PolicyFileError(
            f"{path}: not readable as RLlib writes it ({type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:80]}); expected a file of an RLlib checkpoint"
        ) from None


def _env_of(checkpoint: Path) -> dict[str, Any]:
    """The env_config the run used (from the trial's params.pkl next to the checkpoint)."""
    params = checkpoint.parent / "params.pkl"
    if not params.is_file():
        return {}

    def env_config(config: Any) -> dict[str, Any]:
        found = config.get("env_config", {}) if isinstance(config, dict) else config.env_config
        return dict(found or {})

    return _read(params, env_config)


def export_checkpoint(checkpoint: str | Path, out: str | Path) -> Path:
    """Write the shared module of an RLlib checkpoint as a torch-only policy file."""
    checkpoint = Path(checkpoint).resolve()
    mdir = _module_dir(checkpoint)

    def module_args(blob: Any) -> tuple[Any, Any, dict[str, Any]]:
        kwargs = blob["ctor_args_and_kwargs"][1]
        space = kwargs["observation_space"]
        return space, space.spaces, kwargs

    space, spaces, kwargs = _read(mdir / "class_and_ctor_args.pkl", module_args)
    state = _read(mdir / "module_state.pkl", lambda blob: dict(blob.items()))
    privileged = (0, 0)
    if "nodes" in spaces:  # the round view (MaraRoundModule)
        layout, privileged = round_layout(space), privileged_widths(space)
    else:
        layout = ObsLayout.infer(
            space["observation"].shape[0], space["state"].shape[0], int(kwargs["action_space"].n)
        )
    config = model_config_from(kwargs["model_config"])
    net = MaraNet(layout, config, privileged)
    net.load_state_dict(
        {k.removeprefix("net."): torch.as_tensor(np.asarray(v)) for k, v in state.items()}
    )
    # a privileged critic stays with training: the file holds what acting reads
    return save_policy(net.without_privileged(), out, _env_of(checkpoint), source=str(checkpoint))


def warm_start_state(weights: str | Path) -> dict[str, torch.Tensor]:
    """The ``MaraNet`` state dict in file ``weights``, or :class:`PolicyFileError` saying
    what the file is instead (a policy file, a flow checkpoint, not a torch file)."""
    from mara_agents.policy.policy_file import FORMAT, PolicyFileError

    expected = "expected a warm start such as runs/<name>_pretrain.pt (mara train --pretrain-only)"
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises pickle, zip and runtime errors on other files
        raise PolicyFileError(
            f"{weights}: not a torch state dict ({type(exc).__name__}); {expected}"
        ) from None
    kind = state.get("format") if isinstance(state, dict) else None
    if kind == FORMAT:
        raise PolicyFileError(
            f"{weights}: is a policy file already (format {FORMAT!r}): nothing to export; "
            "use it as it is (mara evaluate --schedulers mara=FILE)"
        )
    if isinstance(kind, str):
        raise PolicyFileError(f"{weights}: is a {kind!r} file, not a warm start; {expected}")
    missing = [k for k in WARM_START_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise PolicyFileError(
            f"{weights}: not a MaraNet state dict (no {missing[0]!r}); {expected}"
        )
    return state


def export_warm_start(weights: str | Path, exp: Experiment, out: str | Path) -> Path:
    """Write a behaviour-cloning warm start (``OUT/<name>_pretrain.pt``) as a policy file."""
    state = warm_start_state(weights)
    k = exp.env.num_slots
    node_dim, slot_dim = state["node_enc.0.weight"].shape[1], state["critic_slot.0.weight"].shape[1]
    obs_dim = node_dim + k * slot_dim
    layout = ObsLayout.infer(obs_dim, obs_dim + len(QUEUE_FEATURES), k + 1)
    net = MaraNet(layout, model_config_from(exp.model))
    net.load_state_dict(state)
    return save_policy(net, out, exp.env_config(), source=f"{Path(weights).resolve()} (warm start)")
