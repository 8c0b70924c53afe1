"""The policy runtime: policy files, loading them, and acting with them (torch, no ray).

A policy file is ``torch.save`` of a plain dict (loaded with ``weights_only=True``)::

    {"format": "mara-policy", "version": 3,
     "layout": {...ObsLayout...}, "model": {...ModelConfig...},
     "env": {...ClusterConfig the policy was trained on...},
     "wrapper": "none" | "flow" | "wls", "wrapper_options": {...},
     "state_dict": {...MaraNet weights...}, "source": "<where it came from>",
     "predictor_sha256": "<flow checkpoint digest>" | None,
     "flow_share": {...FlowShareParams of the pred_nodes_needed / pred_share features...} | None,
     "flow_samples": <flow samples per task behind the features> | None}

:func:`load_policy` checks a file and rebuilds :class:`~mara_agents.policy.network.MaraNet` from
it (every defect is a :class:`PolicyFileError` naming the file, and so is a predictor
checkpoint, flow_share rule or flow sample count that differs from the recorded ones: the
features would mean something else; a file without the record loads with a warning, except
one without ``flow_samples`` whose ``wrapper_options`` name ``n_samples``); :class:`MaraPolicy` acts
on one observation dict; :class:`MaraAgent` drives the PettingZoo env for the evaluation
harness (``reset(env, seed)`` / ``act(env, agent)``).  :mod:`mara_agents.training.export` writes
policy files from training checkpoints.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import warnings
from collections.abc import Iterator
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flow_predictor.wrapper import PREDICTOR_FEATURES, WRAPPERS, make_predictor, wrap
from mara_agents.policy.actor import RoundActor
from mara_agents.policy.network import MaraNet, ModelConfig, ObsLayout
from mara_agents.policy.rounds import decode
from mara_env.cluster_env import NODE_FEATURES, QUEUE_FEATURES, SLOT_FEATURES
from mara_env.config import ClusterConfig

FORMAT = "mara-policy"
# 2: the env's slot rows gained nodes_pending and the wrapper's pred_share (v1 files, whose
# observations lack them, cannot run in the current env).
# 3: MaraNet encodes the slots once per round and adds the per-node features in its head
# (v2 weights belong to the network that encoded the slots per node).
VERSION = 3
SHIPPED_POLICY = Path(__file__).parent / "shipped" / "mara_v10.pt"
REQUIRED_KEYS = ("layout", "model", "wrapper", "state_dict")


class PolicyFileError(ValueError):
    """A file is not a usable MARA policy; the message names the file and what was expected."""


def save_policy(
    net: MaraNet, out: str | Path, env_config: dict[str, Any], source: str = ""
) -> Path:
    """Write ``net`` as a policy file; ``env_config`` as given to the RLlib env creator."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {
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
        "flow_share": _flow_share_record(env_config),
        "flow_samples": _flow_samples(env_config),
    }
    # Written beside and renamed: an interrupted export never leaves a half-written file.
    tmp = out.with_name(out.name + ".tmp")
    torch.save(data, tmp)
    os.replace(tmp, out)
    return out


def _predictor_digest(env_config: dict[str, Any]) -> str | None:
    """SHA-256 of the flow checkpoint the features come from (None without flow features)."""
    if env_config.get("wrapper", "none") != "flow":
        return None
    from flow_predictor.checkpoint import SHIPPED_CHECKPOINT

    path = (env_config.get("wrapper_options") or {}).get("path") or SHIPPED_CHECKPOINT
    return file_digest(path)


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's bytes, as hex."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _flow_share_record(env_config: dict[str, Any]) -> dict[str, float] | None:
    """The flow_share parameters behind the wrapper's features (None without a wrapper)."""
    if env_config.get("wrapper", "none") == "none":
        return None
    from flow_predictor.flow_share import DEFAULTS

    return DEFAULTS.to_dict()


def _flow_samples(env_config: dict[str, Any]) -> int | None:
    """Flow samples per task behind the wrapper's features (None without flow features)."""
    if env_config.get("wrapper", "none") != "flow":
        return None
    from flow_predictor.flow_share import FLOW_SAMPLES

    return int((env_config.get("wrapper_options") or {}).get("n_samples", FLOW_SAMPLES))


def _check_features(path: Path, data: dict[str, Any]) -> None:
    """Refuse a policy whose predictor features this install computes differently."""
    env = {"wrapper": data["wrapper"], "wrapper_options": data.get("wrapper_options")}
    try:
        digest = _predictor_digest(env)
    except OSError as exc:
        raise PolicyFileError(f"{path}: its flow checkpoint cannot be read: {exc}") from None
    now = {"flow_share": _flow_share_record(env), "predictor_sha256": digest}
    for key, current in now.items():
        if current is None:
            continue
        if data.get(key) is None:
            warnings.warn(
                f"{path}: the policy file does not record its {key!r} (written before it was "
                "recorded): unknown whether its predictor features match this install's",
                stacklevel=3,
            )
        elif data[key] != current:
            raise PolicyFileError(
                f"{path}: trained with {key}={data[key]!r}, but this install computes the "
                f"predictor features with {current!r}; retrain the policy, or use the "
                "predictor and flow_share rule it was trained with"
            )
    samples, recorded = _flow_samples(env), data.get("flow_samples")
    if samples is None or recorded == samples:
        return
    if recorded is not None:
        raise PolicyFileError(
            f"{path}: trained with flow_samples={recorded!r}, but this install computes its "
            f"predictor features with {samples!r} (flow_share.FLOW_SAMPLES); retrain the "
            f"policy, or use a release whose FLOW_SAMPLES is {recorded!r}"
        )
    if "n_samples" not in (env["wrapper_options"] or {}):
        # Such files were written while the flow features defaulted to 64 samples.
        warnings.warn(
            f"{path}: the policy file records no flow sample count and its wrapper_options "
            f"name no n_samples (written when the default was 64): its predictor features "
            f"are now computed with {samples} samples",
            stacklevel=3,
        )


class MaraPolicy:
    """A loaded policy: ``act(obs) -> action`` for one node's observation dict."""

    def __init__(self, net: MaraNet, meta: dict[str, Any], seed: int | None = None) -> None:
        self.net = net.eval()
        self.meta = meta
        self.generator = torch.Generator().manual_seed(0 if seed is None else seed)
        self._actor: RoundActor | None = None  # numpy copy of the actor, made when first used

    @property
    def wrapper(self) -> str:
        return self.meta.get("wrapper", "none")

    @property
    def trained_nodes(self) -> int:
        """The cluster size N the policy was trained on (the env default where unrecorded)."""
        return trained_nodes(self.meta)

    def slots_for(self, num_nodes: int) -> int:
        """The slot count to observe a cluster of ``num_nodes`` with (:func:`slots_for`)."""
        return slots_for(self.net.layout.num_slots, self.trained_nodes, num_nodes)

    def with_slots(self, num_slots: int) -> MaraPolicy:
        """The same weights observing ``num_slots`` slots (this policy if it has as many):
        no weight of :class:`MaraNet` depends on the slot count."""
        if num_slots == self.net.layout.num_slots:
            return self
        net = MaraNet(replace(self.net.layout, num_slots=num_slots), self.net.config)
        net.load_state_dict(self.net.state_dict())
        return MaraPolicy(net, self.meta)

    def seed(self, seed: int) -> None:
        """Reseed the sampling generator (only used with ``greedy=False``)."""
        self.generator.manual_seed(seed)

    def logits(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """Masked logits ``(K + 1,)`` of one observation dict (``net.logits`` as numpy)."""
        x = np.asarray(obs["observation"], np.float32)
        lay = self.net.layout
        if x.shape != (lay.obs_dim,):
            raise ValueError(
                f"observation has shape {x.shape}; this policy expects ({lay.obs_dim},) "
                f"({lay.node_dim} node features + {lay.num_slots} slots x {lay.slot_dim}, "
                f"wrapper={self.wrapper!r}): build the env with num_slots={lay.num_slots}"
            )
        mask = np.asarray(obs["action_mask"])
        with torch.inference_mode():
            out = self.net.logits(torch.from_numpy(x)[None], torch.from_numpy(mask)[None])
        return out[0].numpy()

    def act_round(self, obs: dict[str, np.ndarray], greedy: bool = True) -> np.ndarray:
        """The ``N`` node actions of one round observation of
        :class:`~mara_env.round_env.RoundEnv` (decoded node after node, each given the
        earlier ones: the actions :meth:`act` would give node by node in the AEC env)."""
        if greedy:
            if self._actor is None:
                self._actor = RoundActor(self.net)
            return self._actor.greedy(obs)
        batch = {k: torch.from_numpy(np.asarray(v))[None] for k, v in obs.items()}
        with torch.inference_mode():
            actions = decode(self.net, batch, greedy, self.generator)[0]
        return actions[0].numpy()

    def act(self, obs: dict[str, np.ndarray], greedy: bool = True) -> int:
        """Action for one observation: argmax (default) or a sample from the seeded generator."""
        logits = self.logits(obs)
        if greedy:
            return int(logits.argmax())
        probs = torch.softmax(torch.from_numpy(logits), -1)
        return int(torch.multinomial(probs, 1, generator=self.generator))


def _read(path: Path) -> dict[str, Any]:
    """The header-checked dict of a policy file."""
    if not path.exists():
        raise PolicyFileError(f"policy file {str(path)!r} does not exist")
    if not path.is_file():
        raise PolicyFileError(f"policy file {str(path)!r} is not a file")
    if path.stat().st_size == 0:
        raise PolicyFileError(
            f"{path}: policy file is empty; expected a file written by `mara export`"
        )
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    # Arbitrary bytes make torch.load fail in many ways (EOFError, UnpicklingError,
    # RuntimeError from the zip reader, ...): each means the same thing here.
    except Exception as exc:
        raise PolicyFileError(
            f"{path}: not a readable policy file (torch.load failed with {type(exc).__name__}: "
            "truncated, or another kind of file?); expected a file written by `mara export`"
        ) from None
    return _checked(path, data)


def _checked(path: Path, data: Any) -> dict[str, Any]:
    """``data`` (loaded from ``path``) once its header is a policy file's."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise PolicyFileError(f"{path}: not a MARA policy file (no {FORMAT!r} header)")
    if data.get("version") != VERSION:
        raise PolicyFileError(
            f"{path}: policy file version {data.get('version')}; expected {VERSION} "
            "(version 2 files hold the earlier network, which encoded the slots for every "
            "node, and version 1 files an observation layout without nodes_pending and "
            "pred_share: retrain)"
        )
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise PolicyFileError(
            f"{path}: policy file lacks {missing}; expected a file written by `mara export`, "
            f"with the keys {list(REQUIRED_KEYS)}"
        )
    return data


def _section(path: Path, cls: type, values: Any, key: str, complete: bool) -> Any:
    """``cls(**values)`` for the dataclass ``cls``; ``complete``: every field must be given."""
    names = [f.name for f in fields(cls)]
    if isinstance(values, dict):
        unknown = sorted(set(values) - set(names))
        missing = [n for n in names if n not in values] if complete else []
        if not unknown and not missing:
            return cls(**values)
    got = sorted(values) if isinstance(values, dict) else type(values).__name__
    raise PolicyFileError(f"{path}: {key!r} holds {got}; expected the keys {names}")


def _network(path: Path, data: dict[str, Any]) -> MaraNet:
    """The network a checked policy dict describes, with its weights loaded."""
    layout = _section(path, ObsLayout, data["layout"], "layout", complete=True)
    config = _section(path, ModelConfig, data["model"], "model", complete=False)
    wrapper = data["wrapper"]
    if wrapper not in WRAPPERS:
        raise PolicyFileError(f"{path}: wrapper={wrapper!r}; expected one of {list(WRAPPERS)}")
    k = layout.num_slots
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise PolicyFileError(f"{path}: layout num_slots={k!r}; expected a positive integer")
    slot_dim = len(SLOT_FEATURES) + (0 if wrapper == "none" else len(PREDICTOR_FEATURES))
    expected = ObsLayout(len(NODE_FEATURES), slot_dim, k, len(QUEUE_FEATURES))
    if layout != expected:
        have, want = asdict(layout), asdict(expected)
        diff = [f for f in have if have[f] != want[f]]
        got = ", ".join(f"{f}={have[f]!r}" for f in diff)
        env = ", ".join(f"{f}={want[f]!r}" for f in diff)
        raise PolicyFileError(
            f"{path}: layout has {got}; the env with wrapper={wrapper!r} and num_slots={k} "
            f"gives {env}"
        )
    try:
        net = MaraNet(layout, config)
    except (AssertionError, ValueError, TypeError) as exc:
        raise PolicyFileError(f"{path}: model {asdict(config)} cannot be built: {exc}") from None
    state = data["state_dict"]
    want = {k: tuple(v.shape) for k, v in net.state_dict().items()}
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise PolicyFileError(f"{path}: 'state_dict' is not a mapping of names to tensors")
    got = {k: tuple(v.shape) for k, v in state.items()}
    wrong = [f"{k}: missing" for k in want if k not in got]
    wrong += [f"{k}: unexpected" for k in got if k not in want]
    wrong += [f"{k}: shape {got[k]}" for k in want if k in got and got[k] != want[k]]
    if wrong:
        shown = "; ".join(wrong[:3]) + ("; ..." if len(wrong) > 3 else "")
        raise PolicyFileError(
            f"{path}: weights do not fit the network of its layout and model ({shown}); "
            f"expected {len(want)} tensors, e.g. slot_enc.0.weight of shape "
            f"{want['slot_enc.0.weight']}"
        )
    bad = [k for k, v in state.items() if not torch.isfinite(v).all()]
    if bad:
        raise PolicyFileError(
            f"{path}: weights {bad[:3]}{' ...' if len(bad) > 3 else ''} hold NaN or inf; "
            "expected finite numbers"
        )
    net.load_state_dict(state)
    return net


def load_policy(path: str | Path = SHIPPED_POLICY, seed: int | None = None) -> MaraPolicy:
    """Load a policy file written by ``mara export`` (default: the shipped one)."""
    path = Path(path)
    data = _read(path)
    net = _network(path, data)
    _check_features(path, data)
    meta = {k: v for k, v in data.items() if k != "state_dict"}
    return MaraPolicy(net, meta, seed)


def warm_start_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The ``MaraNet`` weights a run starts from (``pretrain.init_weights``): a state dict
    (the clone of ``mara train --pretrain-only``) or a policy file (``mara export``, such
    as the shipped policy, whose header and weights are checked as :func:`load_policy`
    does); a policy file's critic comes with it."""
    path = Path(path)
    data = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(data, dict) and data.get("format") == FORMAT:
        return _network(path, _checked(path, data)).state_dict()
    return data


def trained_nodes(meta: dict[str, Any]) -> int:
    """The cluster size of a policy file's training env: its recorded ``num_nodes``, else
    the env's default, which the training env then had."""
    return int((meta.get("env") or {}).get("num_nodes", ClusterConfig().num_nodes))


def slots_for(trained_slots: int, trained_nodes: int, num_nodes: int) -> int:
    """Slots for a cluster of ``num_nodes``: the trained count, or as many per node as in
    training where that is more (``max(K, ceil(K * N / N_trained))``).

    A node sees only the ``K`` earliest-deadline tasks, so at a fixed ``K`` a big cluster
    hides most of the tasks that uniform share and flow_share serve; the trained ratio
    keeps ``K >= N`` (so the wrapper's ``pred_share`` is flow_share's count, which needs
    every task that gets a node visible) and keeps the features divided by ``K``
    (``active_tasks``, ``queued_tasks``, ``queue_count``) on the scale of training."""
    return max(trained_slots, math.ceil(trained_slots * num_nodes / trained_nodes))


def size_note(arg: str, config: ClusterConfig) -> str | None:
    """One line for a run of ``mara=ARG`` at a cluster size the policy was not trained and
    validated for (None at its trained size)."""
    path = Path(arg or SHIPPED_POLICY)
    data = _read(path)
    n_train, k_train = trained_nodes(data), int(data["layout"]["num_slots"])
    n = config.num_nodes
    if n == n_train:
        return None
    k = slots_for(k_train, n_train, n)
    return (
        f"policy {path.name} was trained and validated on N={n_train} nodes with K={k_train} "
        f"slots; running it on N={n} nodes with K={k} slots, a size it was not trained for"
    )


class MaraAgent:
    """Env-driven agent for the evaluation harness: ``reset(env, seed)``, then
    ``act_round(env)`` once per round (or ``act(env, agent)`` node by node).

    ``env`` is the AEC env the harness steps; when the policy was trained with predictor
    features, the agent observes through its own copy of the same observation wrapper,
    whose predictor it builds once.  It decodes all ``N`` nodes' actions of a round from
    the round's observation (:class:`~mara_env.round_env.RoundEnv`'s view of the same env,
    one slot encoding per round); :meth:`act` hands them out node by node.  They are the
    actions the policy gives each node's own observation (tested).  Build one agent and
    reset it for every episode: the policy file and the flow checkpoint are read once.

    On a cluster of another size it observes :meth:`slots_for` ``(N)`` slots (the harness
    builds the env so), acting with the trained weights on as many slots as the env has.
    """

    def __init__(
        self, policy: MaraPolicy | str | Path = SHIPPED_POLICY, greedy: bool = True
    ) -> None:
        self.policy = policy if isinstance(policy, MaraPolicy) else load_policy(policy)
        self.greedy = greedy
        self.name = "mara"
        # the slot count the policy was trained on; the harness builds this agent's env
        # with slots_for(N) slots, and reset acts with as many
        self.num_slots = self.policy.net.layout.num_slots
        self._trained = self.policy
        self._predictor = make_predictor(self.policy.wrapper, self._wrapper_options)
        self._rounds: Any = None
        self._index: dict[str, int] = {}
        self._actions: list[int] = []

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
        view = wrap(env, self.policy.wrapper, self._wrapper_options, self._predictor)
        self._rounds = RoundEnv(view)
        self._index = {a: i for i, a in enumerate(self._rounds.engine.agents)}
        self._actions = []

    def act_round(self, env: Any) -> np.ndarray:
        """The ``N`` node actions of the round ``env`` is at the start of."""
        with single_thread():
            return self.policy.act_round(self._rounds.observe(), greedy=self.greedy)

    def act(self, env: Any, agent: str) -> int:
        """The action of ``agent`` (the env's current agent)."""
        i = self._index[agent]
        if i == 0:
            self._actions = self.act_round(env).tolist()
        return int(self._actions[i])


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """torch and numpy's BLAS on one thread inside, the caller's thread counts restored
    after: one round is a few small arrays, where more threads only add overhead (and
    contention with the harness's other worker processes)."""
    from flow_predictor.model import single_threaded_blas

    threads = torch.get_num_threads()
    with single_threaded_blas():
        if threads == 1:
            yield
            return
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(threads)


def make_agent(arg: str = "") -> MaraAgent:
    """Harness factory for ``mara=POLICY.pt`` (empty ``POLICY.pt``: the shipped policy)."""
    return MaraAgent(arg or SHIPPED_POLICY)


def check_policy(arg: str = "") -> None:
    """Raise :class:`PolicyFileError` now if ``mara=ARG`` names no usable policy file."""
    load_policy(arg or SHIPPED_POLICY)
