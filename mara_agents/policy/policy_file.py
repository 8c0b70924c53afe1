"""Policy files: the format, writing one, and reading one with every check (torch, no ray).

A policy file is ``torch.save`` of a plain dict (loaded with ``weights_only=True``)::

    {"format": "mara-policy", "version": 3,
     "layout": {...ObsLayout...}, "model": {...ModelConfig...},
     "env": {...ClusterConfig the policy was trained on...},
     "wrapper": "none" | "flow" | "flow+deadline" | "task" | "wls", "wrapper_options": {...},
     "state_dict": {...MaraNet weights...}, "source": "<where it came from>",
     "predictor_sha256": "<flow checkpoint digest>[+<remaining-work model digest>]" | None,
     "teacher": "<the spec of the scheduler whose plan the features read>" | None,
     "flow_samples": <flow samples per task behind the features> | None,
     "deadline_prior": [...the deadline prior's log ratios...] | None,
     "deadline_windows": [...its log windows, where it has them...] | None,
     "teacher_miss_cost": <the price of a miss a teacher's miss_cost=cluster was> | None}

``teacher`` (e.g. ``hedge:confidence=0.05:flow_spread=2.0:quantiles=256``), ``flow_samples``,
``deadline_prior``, ``deadline_windows`` and ``teacher_miss_cost`` are the
:class:`~mara_agents.policy.features.FeatureSettings` the policy was trained with;
acting, its features are computed with them again (:func:`feature_settings_of`).  Files
written before the teacher was one spec record its knobs under ``flow_share`` and
``hedge`` instead; :func:`teacher_of_old_header` reads them as the spec they meant.

:func:`read_policy` reads a file once per process and checks its header;
:func:`build_network` rebuilds :class:`~mara_agents.policy.network.MaraNet` from it.  Every
defect is a :class:`PolicyFileError` naming the file, and so is a flow checkpoint other
than the recorded one; a file without the feature record acts with the wrapper's defaults,
with a warning.  :mod:`mara_agents.training.export` writes policy files from training
checkpoints; :mod:`mara_agents.policy.inference` acts with them.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flow_predictor.deadline_prior import DeadlinePrior
from flow_predictor.remaining import FLOW_SAMPLES
from flow_predictor.wrapper import FLOW_WRAPPERS, PRIOR_WRAPPERS, TASK_WRAPPERS, WRAPPERS
from mara_agents.outputs import file_digest
from mara_agents.planning.hedge_rule import HedgeParams
from mara_agents.planning.history import ClusterHistory
from mara_agents.planning.share_rule import FlowShareParams
from mara_agents.policy.features import (
    ADDED_FEATURES,
    SHARE_TEACHER,
    FeatureSettings,
    TeacherPlan,
    feature_settings,
    prior_fields,
)
from mara_agents.policy.network import MaraNet, ModelConfig, ObsLayout
from mara_env.atomic import atomic_path
from mara_env.config import ClusterConfig
from mara_env.engine import NODE_FEATURES, QUEUE_FEATURES, SLOT_FEATURES

FORMAT = "mara-policy"
# 2: the env's slot rows gained nodes_pending and the wrapper's pred_share (v1 files, whose
# observations lack them, cannot run in the current env).
# 3: MaraNet encodes the slots once per round and adds the per-node features in its head
# (v2 weights belong to the network that encoded the slots per node).
VERSION = 3
SHIPPED_POLICY = Path(__file__).parent / "shipped" / "mara_v19.pt"
REQUIRED_KEYS = ("layout", "model", "wrapper", "state_dict")


class PolicyFileError(ValueError):
    """A file is not a usable MARA policy; the message names the file and what was expected."""


def save_policy(
    net: MaraNet, out: str | Path, env_config: dict[str, Any], source: str = ""
) -> Path:
    """Write ``net`` as a policy file; ``env_config`` as given to the RLlib env creator (its
    ``history``: the cluster's, else read here)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    wrapper = env_config.get("wrapper", "none")
    options = env_config.get("wrapper_options") or {}
    cluster = ClusterConfig.from_dict(dict(env_config.get("cluster") or {}))
    history = env_config.get("history") or ClusterHistory.of(cluster)
    settings = feature_settings(wrapper, options, history)
    prior = None if settings is None else settings.deadline_prior
    windows = None if settings is None else settings.deadline_windows
    data = {
        "format": FORMAT,
        "version": VERSION,
        "layout": asdict(net.layout),
        "model": asdict(net.config),
        "env": env_config.get("cluster", {}),
        "wrapper": wrapper,
        "wrapper_options": env_config.get("wrapper_options", {}),
        "state_dict": net.state_dict(),
        "source": source,
        "predictor_sha256": _predictor_digest(wrapper, options),
        "teacher": None if settings is None else settings.teacher,
        "flow_samples": settings.samples if wrapper in FLOW_WRAPPERS else None,
        "deadline_prior": list(prior) if prior else None,
        "deadline_windows": list(windows) if windows else None,
        "teacher_miss_cost": None if settings is None else settings.miss_cost,
    }
    # an interrupted export leaves no half-written file; saved through a file object, the
    # archive's inner name is not the temporary's random one: the same policy, the same bytes
    with atomic_path(out) as tmp, open(tmp, "wb") as f:
        torch.save(data, f)
    return out


def _predictor_digest(wrapper: str, options: dict[str, Any] | None) -> str | None:
    """SHA-256 of the flow checkpoint the features come from (None without flow features),
    and for the ``task`` and ``cluster`` wrappers that of the shipped remaining-work model
    after a ``+``."""
    if wrapper not in FLOW_WRAPPERS:
        return None
    from flow_predictor.checkpoint import SHIPPED_CHECKPOINT

    digest = file_digest((options or {}).get("path") or SHIPPED_CHECKPOINT)
    if wrapper not in TASK_WRAPPERS:
        return digest
    from flow_predictor.task_work import SHIPPED_TASK_WORK

    return f"{digest}+{file_digest(SHIPPED_TASK_WORK)}"


def feature_settings_of(path: str | Path, data: dict[str, Any]) -> FeatureSettings | None:
    """The :class:`~mara_agents.policy.features.FeatureSettings` a checked policy dict's
    features were computed with (None without a wrapper); a flow checkpoint other than the
    recorded one is a :class:`PolicyFileError` (its features would mean something else)."""
    wrapper, options = data["wrapper"], data.get("wrapper_options") or {}
    if wrapper == "none":
        return None
    try:
        digest = _predictor_digest(wrapper, options)
    except OSError as exc:
        raise PolicyFileError(f"{path}: its predictor's checkpoint cannot be read: {exc}") from None
    recorded = data.get("predictor_sha256")
    if digest is not None and recorded is not None and recorded != digest:
        raise PolicyFileError(
            f"{path}: trained with predictor_sha256={recorded!r}, but the flow checkpoint "
            f"its wrapper_options name (and, for wrappers {list(TASK_WRAPPERS)}, the shipped "
            f"remaining-work model) has {digest!r}; retrain the policy, or use the predictor "
            "it was trained with"
        )
    samples = data.get("flow_samples") or int(options.get("n_samples", FLOW_SAMPLES))
    teacher = data.get("teacher") or teacher_of_old_header(path, data, samples)
    teacher = None if teacher is None else recorded_teacher(teacher)
    missing = [] if teacher is not None else ["teacher"]
    if wrapper in FLOW_WRAPPERS:
        missing += [] if recorded is not None else ["predictor_sha256"]
        unknown = data.get("flow_samples") is None and "n_samples" not in options
        missing += ["flow_samples"] if unknown else []
    if missing:
        warnings.warn(
            f"{path}: the policy file does not record its {missing} (written before they were "
            f"recorded): its predictor features are computed with teacher "
            f"{teacher or SHARE_TEACHER!r} and {samples} flow samples",
            stacklevel=3,
        )
    if wrapper not in PRIOR_WRAPPERS:
        return _settings(path, teacher or SHARE_TEACHER, samples, (), ())
    prior, windows = data.get("deadline_prior"), data.get("deadline_windows")
    try:  # a flow+deadline policy acts with the prior it was trained with
        x = None if windows is None else np.asarray(windows, np.float64)
        fitted = DeadlinePrior(np.asarray(prior, np.float64), {}, x)
    except (TypeError, ValueError) as exc:
        raise PolicyFileError(
            f"{path}: wrapper={wrapper!r} needs the 'deadline_prior' it was trained with; the "
            f"file holds a prior of {type(prior).__name__}: {exc}"
        ) from None
    if teacher is None:
        raise PolicyFileError(
            f"{path}: wrapper={wrapper!r} needs the 'teacher' it was trained with (or the "
            "'hedge' knobs of files written before it); the file records neither"
        )
    miss_cost = data.get("teacher_miss_cost")
    if miss_cost is None and _prices_by_cluster(teacher):
        raise PolicyFileError(
            f"{path}: teacher {teacher!r} prices a miss by its cluster's history, but the "
            "file does not record the price it was trained with ('teacher_miss_cost')"
        )
    # a cluster-wrapper policy's task_work is its cluster's choice per workload, which
    # whoever acts with it sets (MaraAgent); recorded as the calibrated model
    task_work = wrapper in TASK_WRAPPERS
    fields_ = {**prior_fields(fitted), "miss_cost": miss_cost, "task_work": task_work}
    return _settings(path, teacher, samples, **fields_)


def _prices_by_cluster(teacher: str) -> bool:
    """Whether ``teacher`` is a hedge spec whose ``miss_cost`` is ``cluster`` (a spec that
    does not parse: False, :func:`_settings` names its defect)."""
    try:
        return TeacherPlan.from_spec(teacher).prices_by_cluster
    except ValueError:
        return False


def recorded_teacher(spec: str) -> str:
    """A teacher spec as a file records it, in today's words: a hedge teacher's
    ``miss_cost=history`` is ``miss_cost=cluster``; a hedge spec without ``miss_cost``
    was written while a miss was charged its nodes to the deadline (1) by default, one
    without ``urgency`` while urgency was off (0) by default, and one with ``urgency`` but
    no ``wait`` while urgency's wait was one tick."""
    name, *params = spec.split(":")
    if name != "hedge":
        return spec
    keys = [p.partition("=")[0] for p in params]
    params = ["miss_cost=cluster" if p == "miss_cost=history" else p for p in params]
    added = [] if "miss_cost" in keys else ["miss_cost=1.0"]
    if "urgency" not in keys:
        added.append("urgency=0.0")
    elif "wait" not in keys:
        added.append("wait=1")
    return ":".join([name, *params, *added])


def _settings(
    path: str | Path,
    teacher: str,
    samples: int,
    deadline_prior: tuple[float, ...],
    deadline_windows: tuple[float, ...],
    miss_cost: float | None = None,
    task_work: bool = False,
) -> FeatureSettings:
    """:class:`FeatureSettings` of a file's record, a defect of it a :class:`PolicyFileError`."""
    try:
        return FeatureSettings(
            teacher, samples, deadline_prior, deadline_windows, miss_cost, task_work
        )
    except (TypeError, ValueError) as exc:
        raise PolicyFileError(f"{path}: 'teacher' holds {teacher!r}: {exc}") from None


# knobs of hedge that older files record and that never acted at these values
_RETIRED_HEDGE_KNOBS = {"explore": 0, "tail": 0.0}


def teacher_of_old_header(path: str | Path, data: dict[str, Any], samples: int) -> str | None:
    """The teacher spec a file written before the ``teacher`` key meant by its ``flow_share``
    and ``hedge`` keys (None if it records neither): hedge's knobs (its quantile count
    the flow ``samples`` where unrecorded) when it records them, else flow_share's."""
    share, hedge = data.get("flow_share"), data.get("hedge")
    try:
        rule = None if share is None else FlowShareParams(**share)
        if hedge is None:
            return None if rule is None else TeacherPlan("flow_share", rule).spec
        hedge = dict(hedge)
        for key, inert in _RETIRED_HEDGE_KNOBS.items():
            if hedge.pop(key, inert) != inert:
                raise ValueError(f"hedge's {key} was removed; only {key}={inert!r} can be read")
        if rule not in (None, FlowShareParams()):
            raise ValueError(f"a hedge teacher reads the share rule's defaults, not {share!r}")
        knobs = HedgeParams(**{"quantiles": samples, "miss_cost": 1.0, "urgency": 0.0, **hedge})
    except (TypeError, ValueError) as exc:
        raise PolicyFileError(
            f"{path}: 'flow_share' {share!r} and 'hedge' {hedge!r} are not a teacher: {exc}"
        ) from None
    return TeacherPlan("hedge", FlowShareParams(), knobs).spec


def read_policy(path: str | Path = SHIPPED_POLICY) -> dict[str, Any]:
    """The header-checked dict of a policy file, read once per process while the file is
    unchanged (the harness's check, its size note and its agent share it; do not modify it)."""
    path = Path(path)
    try:
        stamp = path.stat()
        key: tuple[int, int] | None = (stamp.st_mtime_ns, stamp.st_size)
    except OSError:
        key = None  # _read names what is wrong with it
    return _read(path, key)


@functools.lru_cache(maxsize=8)
def _read(path: Path, stamp: tuple[int, int] | None) -> dict[str, Any]:
    """The header-checked dict of the policy file at ``path`` (``stamp``: its modification
    time and size, so that a rewritten file is read again)."""
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


def build_network(path: str | Path, data: dict[str, Any]) -> MaraNet:
    """The network a checked policy dict describes, with its weights loaded."""
    layout = _section(path, ObsLayout, data["layout"], "layout", complete=True)
    config = _section(path, ModelConfig, data["model"], "model", complete=False)
    wrapper = data["wrapper"]
    if wrapper not in WRAPPERS:
        raise PolicyFileError(f"{path}: wrapper={wrapper!r}; expected one of {list(WRAPPERS)}")
    k = layout.num_slots
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise PolicyFileError(f"{path}: layout num_slots={k!r}; expected a positive integer")
    slot_dim = len(SLOT_FEATURES) + (0 if wrapper == "none" else len(ADDED_FEATURES))
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


def warm_start_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The ``MaraNet`` weights a run starts from (``pretrain.init_weights``): a state dict
    (the clone of ``mara train --pretrain-only``) or a policy file (``mara export``, such
    as the shipped policy, whose header and weights are checked as
    :func:`build_network` does); a policy file's critic comes with it."""
    path = Path(path)
    data = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(data, dict) and data.get("format") == FORMAT:
        return build_network(path, _checked(path, data)).state_dict()
    return data


def trained_nodes(meta: dict[str, Any]) -> int:
    """The cluster size of a policy file's training env: its recorded ``num_nodes``, else
    the env's default, which the training env then had."""
    return int((meta.get("env") or {}).get("num_nodes", ClusterConfig().num_nodes))
