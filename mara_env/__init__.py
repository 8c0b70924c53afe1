"""mara_env: trace library, workload generator, cluster simulator and PettingZoo env.

Importing this package registers ``mara/ComputeCluster-v2`` in PettingZoo's AEC and
parallel registries: ``pettingzoo.make("aec", "mara/ComputeCluster-v2")``, or directly
``mara_env.env(...)`` / ``mara_env.parallel_env(...)`` / ``mara_env.raw_env(...)``; the
environment's module (its specification: ``raw_env``'s docstring) is
:mod:`mara_env.cluster_env`.
No torch, no ray: any RL library can use it.
"""

from pettingzoo import register as _register

from mara_env.cluster import ClusterSim, InvalidAssignment
from mara_env.cluster_env import ENV_ID, InvalidActionError, env, parallel_env, raw_env
from mara_env.config import ClusterConfig, ConfigError
from mara_env.traces import TraceError, TraceSet, load_traces, read_traces

_register("aec", ENV_ID, "mara_env.cluster_env:env")
_register("parallel", ENV_ID, "mara_env.cluster_env:parallel_env")

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
