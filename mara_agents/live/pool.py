"""Workers on Ray: one actor per node, holding one unit of the node resource.

A node is a GPU where there are GPUs (``resource="GPU"``), a CPU (``"CPU"``), or a custom
resource (the default, ``"mara_node"``, which :func:`start_local_ray` declares ``N`` of, so
that a laptop runs ``N`` nodes whatever its cores).  Actors restart when they die; a
restarted actor has lost its job's state and rebuilds it from the checkpoint on its next
slice.

:func:`start_local_ray` starts a private Ray with the dashboard off and token authentication
on: an unauthenticated Ray runs anyone's code.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError

from mara_agents.live.cluster import Slice
from mara_agents.live.worker import NodeWorker

NODE_RESOURCE = "mara_node"
GRACE_S = 20.0  # beyond a slice's seconds before its workers count as hung


def start_local_ray(num_nodes: int, num_cpus: int | None = None) -> None:
    """A private local Ray: token authentication on, no dashboard, ``num_nodes`` node
    resources.

    Ray 2.60 binds its ports to the machine's address (it turns 127.0.0.1 into a
    reachable one), so what keeps other hosts out is its token authentication, on by
    default since Ray 2.52+: this refuses to start a Ray with it turned off.
    """
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled":
        raise RuntimeError(
            "RAY_AUTH_MODE=disabled: mara live does not start a Ray that runs anyone's code; "
            "unset RAY_AUTH_MODE (token authentication is Ray's default)"
        )
    paths = [os.getcwd(), *[p for p in sys.path if p and os.path.isdir(p)]]
    ray.init(
        address="local",  # a new Ray of our own, whatever RAY_ADDRESS an earlier one left
        num_cpus=num_cpus or os.cpu_count() or 1,
        resources={NODE_RESOURCE: num_nodes},
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}},
    )


def _node_options(resource: str) -> dict[str, Any]:
    if resource == "GPU":
        return {"num_gpus": 1, "num_cpus": 0}
    if resource == "CPU":
        return {"num_cpus": 1}
    return {"num_cpus": 0, "resources": {resource: 1}}


class RayPool:
    """``num_nodes`` :class:`NodeWorker` actors on the connected Ray cluster."""

    def __init__(self, num_nodes: int, resource: str = NODE_RESOURCE, threads: int = 1) -> None:
        have = ray.cluster_resources().get(resource, 0)
        if have < num_nodes:
            raise RuntimeError(
                f"the Ray cluster has {have:g} of resource {resource!r}; {num_nodes} nodes "
                "need one each (start workers with `ray start --resources` or use --resource)"
            )
        actor = ray.remote(NodeWorker).options(
            max_restarts=-1, max_task_retries=0, **_node_options(resource)
        )
        self.workers = [actor.remote(i, threads) for i in range(num_nodes)]
        self.pids = ray.get([w.pid.remote() for w in self.workers])

    def probe(self, specs: list[dict[str, Any]], seconds: float = 1.0) -> list[dict[str, Any]]:
        """Each job on one node, round-robin over the workers, all at once."""
        refs = [
            self.workers[i % len(self.workers)].probe.remote(spec, seconds)
            for i, spec in enumerate(specs)
        ]
        out = []
        for spec, ref in zip(specs, refs):
            try:
                out.append(ray.get(ref))
            except RayError as exc:
                raise RuntimeError(f"job {spec['name']!r} could not start: {exc}") from None
        return out

    def run(self, slices: list[Slice], seconds: float) -> dict[int, dict[str, Any]]:
        """Every slice at once; waits at most ``seconds + GRACE_S`` for their workers."""
        outcomes: dict[int, dict[str, Any]] = {}
        places: dict[int, str | None] = {}
        pending = {
            s.task: self.workers[s.nodes[0]].rendezvous.remote()
            for s in slices
            if s.fresh and len(s.nodes) > 1
        }
        for k, ref in pending.items():
            try:
                places[k] = ray.get(ref, timeout=GRACE_S)
            except (RayError, GetTimeoutError) as exc:
                outcomes[k] = {"status": "lost", "error": f"rendezvous: {exc}".splitlines()[0]}
        refs: dict[int, list[Any]] = {}
        for s in slices:
            if s.task in outcomes:
                continue
            state = ray.put(s.state) if s.state is not None else None
            refs[s.task] = [
                self.workers[node].run_slice.remote(
                    s.spec,
                    s.generation,
                    rank,
                    len(s.nodes),
                    places.get(s.task),
                    state,
                    seconds,
                    max(10.0, 2 * seconds),
                )
                for rank, node in enumerate(s.nodes)
            ]
        flat = [r for rs in refs.values() for r in rs]
        _, late = ray.wait(flat, num_returns=len(flat), timeout=seconds + GRACE_S)
        late_set = set(late)
        by_ref = {r: s for s in slices if s.task in refs for r in refs[s.task]}
        for ref in late:  # hung (a peer gone without a word): restart its worker
            s = by_ref[ref]
            ray.kill(self.workers[s.nodes[refs[s.task].index(ref)]], no_restart=False)
        for k, rs in refs.items():
            outcomes[k] = self._outcome(rs, late_set)
        return outcomes

    @staticmethod
    def _outcome(refs: list[Any], late: set[Any]) -> dict[str, Any]:
        results, died = [], None
        for ref in refs:
            if ref in late:
                died = died or "a worker did not answer within the slice"
                continue
            try:
                results.append(ray.get(ref))
            except RayActorError as exc:
                died = died or f"worker died: {str(exc).splitlines()[0]}"
        if died:
            return {"status": "lost", "error": died}
        errors = [r for r in results if "error" in r]
        own = [r for r in errors if not r["communication"]]
        if own:
            return {"status": "failed", "error": own[0]["error"], "traceback": own[0]["traceback"]}
        if errors:
            return {"status": "lost", "error": errors[0]["error"]}
        head = next(r for r in results if r["rank"] == 0)
        return {"status": "ok", **head}

    def shutdown(self) -> None:
        for w in self.workers:
            ray.kill(w, no_restart=True)
