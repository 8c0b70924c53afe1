"""mara_env: trace library, workload generator, cluster simulator and PettingZoo env.

Importing this package registers ``mara/ComputeCluster-v3`` in PettingZoo's AEC and
parallel registries: ``pettingzoo.make("aec", "mara/ComputeCluster-v3")``, or directly
``mara_env.env(...)`` / ``mara_env.parallel_env(...)`` / ``mara_env.raw_env(...)``; the
environment's module (its specification: ``raw_env``'s docstring) is
:mod:`mara_env.cluster_env`.  ``mara/ComputeCluster-v2`` stays registered with its own
deadlines (``deadline_model="unbiased"``).
No torch, no ray: any RL library can use it.
"""

from pettingzoo import register as _register

from mara_env.cluster import ClusterSim, InvalidAssignment
from mara_env.cluster_env import (
    ENV_ID,
    V2_ID,
    InvalidActionError,
    env,
    parallel_env,
    raw_env,
)
from mara_env.config import ClusterConfig, ConfigError
from mara_env.traces import TraceError, TraceSet, load_traces, read_traces

_register("aec", ENV_ID, "mara_env.cluster_env:env")
_register("parallel", ENV_ID, "mara_env.cluster_env:parallel_env")
_register("aec", V2_ID, "mara_env.cluster_env:env_v2")
_register("parallel", V2_ID, "mara_env.cluster_env:parallel_env_v2")

__all__ = [
    "ENV_ID",
    "ClusterConfig",
    "ClusterSim",
    "ConfigError",
    "InvalidActionError",
    "InvalidAssignment",
    "TraceError",
    "TraceSet",
    "env",
    "load_traces",
    "parallel_env",
    "raw_env",
    "read_traces",
]
