"""Versioned checkpoints of the flow predictor, and the loader of the shipped one.

A checkpoint is a ``torch.save`` dict whose header fields are plain Python values:
``format`` (:data:`FORMAT`), ``version`` (:data:`VERSION`), ``grids`` (the condition
grid, future ratios and summary-statistic names it was trained on), ``norm``
(normalisation), ``model_config``, ``state_dict`` and ``calibration`` (the ``spread``
fitted on the validation split); training checkpoints add
``train`` (epoch, optimiser state, metrics, arguments) so ``--resume`` can continue.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flow_predictor.features import COND_GRID, FUTURE_RATIOS, STAT_NAMES
from flow_predictor.flow import FlowPredictor, Normalisation
from flow_predictor.model import FlowConfig, VelocityNet
from mara_env.atomic import atomic_path

FORMAT = "mara-flow-predictor"
VERSION = 1
SHIPPED_CHECKPOINT = Path(__file__).parent / "checkpoints" / "flow_v3.pt"


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable or incompatible; the message names file and cause."""


def current_grids() -> dict[str, list]:
    """The grids this code featurises with (a checkpoint must match them exactly)."""
    return {
        "cond_grid": COND_GRID.tolist(),
        "future_ratios": FUTURE_RATIOS.tolist(),
        "stat_names": list(STAT_NAMES),
    }


def to_cpu(value: Any) -> Any:
    """``value`` with every tensor in it (in dicts, lists and tuples) on the CPU; a value
    holding only CPU tensors is itself (a CPU run saves what it always saved)."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        items = {k: to_cpu(v) for k, v in value.items()}
        if all(items[k] is v for k, v in value.items()):
            return value
        moved = type(value)(items)
        if hasattr(value, "_metadata"):  # a state_dict's module versions
            moved._metadata = value._metadata
        return moved
    if isinstance(value, (list, tuple)):
        parts = [to_cpu(v) for v in value]
        return value if all(a is b for a, b in zip(parts, value)) else type(value)(parts)
    return value


def save_checkpoint(
    path: str | os.PathLike,
    net: VelocityNet,
    norm: Normalisation,
    train: dict[str, Any] | None = None,
    spread: float = 1.0,
) -> None:
    """Write a checkpoint atomically (a crash never leaves a half-written file); its
    tensors are on the CPU, wherever ``net`` and ``train``'s optimiser state are, so the
    file loads anywhere."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = {
        "format": FORMAT,
        "version": VERSION,
        "grids": current_grids(),
        "norm": norm.to_dict(),
        "model_config": net.config.to_dict(),
        "state_dict": to_cpu(net.state_dict()),
        "calibration": {"spread": float(spread)},
    }
    if train is not None:
        blob["train"] = to_cpu(train)
    save_blob(path, blob)


def save_blob(path: str | os.PathLike, blob: dict[str, Any]) -> None:
    """``torch.save`` of ``blob`` to ``path``, atomically."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:  # a file object: the same bytes
        torch.save(blob, f)  # for the same checkpoint (not the temporary's name inside)


def load_blob(path: str | os.PathLike, what: str, writer: str) -> Any:
    """``torch.load`` of a checkpoint file of kind ``what`` (tensors and plain values only);
    raises :class:`CheckpointError` naming the file, the cause and ``writer``, the command
    that writes such a file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        # torch warns about foreign pickles on the way to failing: the error says it all
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    # Arbitrary bytes make torch.load fail in many ways (UnpicklingError with a page of
    # advice, RuntimeError from the zip reader, ...): each means the same thing here.
    except Exception as exc:
        raise CheckpointError(
            f"{path}: not a {what} checkpoint (torch.load failed with "
            f"{type(exc).__name__}: truncated, or another kind of file?); expected a file "
            f"written by `{writer}`"
        ) from None


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load and check a checkpoint's header; raises :class:`CheckpointError`."""
    path = Path(path)
    blob = load_blob(path, "flow-predictor", "mara predictor train")
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise CheckpointError(
            f"{path}: not a flow-predictor checkpoint (expected a dict with format={FORMAT!r})"
        )
    if blob.get("version") != VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format version {blob.get('version')!r}; this code reads "
            f"version {VERSION}. Retrain with `mara predictor train` or use a matching release."
        )
    for key in ("grids", "norm", "model_config", "state_dict"):
        if key not in blob:
            raise CheckpointError(f"{path}: checkpoint lacks {key!r}")
    expected = current_grids()
    for name, want in expected.items():
        got = blob["grids"].get(name)
        same = got is not None and len(got) == len(want)
        if same and name != "stat_names":
            same = bool(np.allclose(got, want, rtol=1e-9, atol=0))
        elif same:
            same = list(got) == want
        if not same:
            raise CheckpointError(
                f"{path}: grid {name!r} does not match this code (expected {len(want)} "
                f"values {want[0]} … {want[-1]}, found "
                f"{'none' if got is None else f'{len(got)} values'}); retrain the checkpoint"
            )
    return blob


def build_net(blob: dict[str, Any], path: str | os.PathLike = "<checkpoint>") -> VelocityNet:
    """The velocity network described and parameterised by a checkpoint."""
    try:
        net = VelocityNet(FlowConfig(**blob["model_config"]))
        net.load_state_dict(blob["state_dict"])
    except (TypeError, RuntimeError) as exc:
        raise CheckpointError(f"{path}: model config and weights do not fit ({exc})") from exc
    return net


def load_predictor(path: str | os.PathLike | None = None, **kwargs: Any) -> FlowPredictor:
    """The flow predictor stored at ``path`` (default: the checkpoint shipped with the package).

    ``kwargs`` go to :class:`FlowPredictor` (``n_samples``, ``steps``, ``method``, ``seed``,
    ``spread``; the default spread is the checkpoint's calibrated one).
    """
    path = Path(path) if path is not None else SHIPPED_CHECKPOINT
    blob = read_checkpoint(path)
    norm = Normalisation.from_dict(blob["norm"])
    kwargs.setdefault("spread", float(blob.get("calibration", {}).get("spread", 1.0)))
    return FlowPredictor(build_net(blob, path), norm, **kwargs)
