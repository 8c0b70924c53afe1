"""Loss-curve predictors: conditional flow matching, WLS and Optimus baselines, env wrapper.

``flow_predictor.wls`` and ``flow_predictor.optimus`` are numpy/scipy only; torch is
imported only when the flow model is used (``load_predictor``, ``FlowPredictor``).
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "load_predictor": "flow_predictor.checkpoint",
    "CheckpointError": "flow_predictor.checkpoint",
    "FlowPredictor": "flow_predictor.flow",
    "WLSPredictor": "flow_predictor.wls",
    "OptimusPredictor": "flow_predictor.optimus",
    "RemainingWork": "flow_predictor.remaining",
    "PredictorFeatures": "flow_predictor.wrapper",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'flow_predictor' has no attribute {name!r}")
