"""One compute node of a live cluster: trains whichever job it is given, one slice at a time.

:class:`NodeWorker` is a plain class; :mod:`mara_agents.live.cluster` runs one per node as
a Ray actor holding one unit of the node resource.  A job on ``n`` nodes trains
data-parallel on ``n`` workers: every worker builds the job's trainer, computes the
gradient of its shard of the global batch, and the gradients are summed with
``torch.distributed`` (gloo), so each step is the single-process step on the whole batch.
Whenever the set of workers of a job changes (a new *generation*), every worker rebuilds
the trainer from the job's last checkpoint and joins a new process group: that is the real
cost of re-assigning nodes, and it is paid inside the slice.

A job evaluates as a real job does: rank 0 evaluates the held-out loss every
``eval_every`` steps, inside the slice, and the job stops at the first evaluation at or
below its target.  A loss that is NaN or infinite ends the job with
:class:`~mara_agents.live.trainers.DivergedError`.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from mara_agents.live.trainers import finite_loss, make_trainer, train_step


def _sum_gradients(grads: list[torch.Tensor]) -> None:
    """All-reduce (sum) a list of gradient tensors in one flat message."""
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


class NodeWorker:
    """A node: builds, restores, trains, evaluates and checkpoints the job it is given."""

    def __init__(self, index: int, threads: int = 1) -> None:
        torch.set_num_threads(threads)
        self.index = index
        self._key: tuple[str, int] | None = None
        self._trainer: Any = None
        self._world = 1

    def pid(self) -> int:
        """This worker's process id (fault tests kill it)."""
        return os.getpid()

    def rendezvous(self) -> str:
        """A ``tcp://host:port`` on this worker's host for a new process group."""
        import ray

        host = ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        return f"tcp://{host}:{port}"

    def probe(self, spec: dict[str, Any], seconds: float) -> dict[str, float]:
        """A fresh copy of the job: its loss before training and its one-node steps/s.

        A job that cannot be built raises (the run cannot start); one whose training step
        raises comes back with ``error`` set and ``steps_per_s`` NaN when no step finished:
        the run marks that job failed and goes on without it."""
        t0 = time.perf_counter()
        trainer = make_trainer(spec["trainer"], spec["params"], spec["seed"])
        loss0 = float(trainer.evaluate())
        built = time.perf_counter()
        steps, error = 0, ""
        while steps < 2 or time.perf_counter() - built < seconds:
            try:
                train_step(trainer)
            except Exception as exc:  # the job's own bug: it fails alone
                error = f"{type(exc).__name__}: {exc}"
                break
            steps += 1
        out = {
            "family": trainer.family,
            "loss0": loss0,
            "steps_per_s": steps / (time.perf_counter() - built) if steps else float("nan"),
            "build_s": built - t0,
        }
        if error:
            out["error"] = error
        return out

    def _release(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
        self._key, self._trainer, self._world = None, None, 1

    def run_slice(
        self,
        spec: dict[str, Any],
        generation: int,
        rank: int,
        world: int,
        rendezvous: str | None,
        state: bytes | None,
        seconds: float,
        timeout_s: float,
    ) -> dict[str, Any]:
        """Train ``spec`` for ``seconds`` of wall time (set-up included) as ``rank`` of
        ``world``, rank 0 evaluating every ``spec["eval_every"]`` steps, until the slice
        ends or an evaluation is at or below ``spec["target"]``; rank 0 then checkpoints.
        Rank 0's report holds ``evals`` (``[step, loss]`` of each evaluation) and
        ``passed``.  Errors come back as data."""
        t0 = time.perf_counter()
        key = (spec["name"], generation)
        try:
            if self._key != key and world > 1 and rendezvous is None:
                # restarted since its group formed: the group cannot be joined again
                self._release()
                return {
                    "rank": rank,
                    "error": "worker restarted since the job's process group formed",
                    "traceback": "",
                    "communication": True,
                }
            built = self._key != key
            if built:
                self._release()
                trainer = make_trainer(spec["trainer"], spec["params"], spec["seed"])
                if state is not None:
                    trainer.load(state)
                if world > 1:
                    dist.init_process_group(
                        "gloo",
                        init_method=rendezvous,
                        rank=rank,
                        world_size=world,
                        timeout=timedelta(seconds=timeout_s),
                    )
                self._key, self._trainer, self._world = key, trainer, world
            trainer = self._trainer
            setup_s = time.perf_counter() - t0
            start_steps = trainer.steps
            reduce = _sum_gradients if world > 1 else None
            every, target = int(spec["eval_every"]), float(spec["target"])
            evals: list[list[float]] = []
            eval_s, passed = 0.0, False
            end, step_s, go = t0 + seconds, 0.0, torch.ones(1)
            while True:
                now = time.perf_counter()
                go[0] = float(not passed and now + step_s < end)
                if world > 1:  # rank 0's clock decides for everyone: steps stay in lockstep
                    dist.broadcast(go, src=0)
                if not go[0]:
                    break
                train_step(trainer, rank, world, reduce)
                if rank == 0 and trainer.steps % every == 0:
                    t1 = time.perf_counter()
                    loss = finite_loss(float(trainer.evaluate()), trainer.steps, "held-out")
                    eval_s += time.perf_counter() - t1
                    evals.append([trainer.steps, loss])
                    passed = loss <= target  # the job stops here, as a real one would
                taken = time.perf_counter() - now
                step_s = taken if step_s == 0.0 else 0.8 * step_s + 0.2 * taken
            train_s = time.perf_counter() - t0 - setup_s - eval_s
            out: dict[str, Any] = {
                "rank": rank,
                "steps": int(trainer.steps),
                "slice_steps": int(trainer.steps - start_steps),
                "built": built,  # this slice built (and restored) the job: set-up paid
                "setup_s": setup_s,
                "train_s": train_s,
                # the running estimate of a step (its evaluation included) the slice stopped
                # on: it ends when one more step would overrun the tick
                "step_estimate_s": step_s,
            }
            if rank == 0:
                t1 = time.perf_counter()
                out["evals"], out["passed"] = evals, passed
                out["state"] = trainer.state()
                out["eval_s"] = eval_s + time.perf_counter() - t1
            return out
        except Exception as exc:  # the job's own error, or a peer that went away
            self._release()
            return {
                "rank": rank,
                "error": f"{type(exc).__name__}: {exc}".splitlines()[0],
                "traceback": traceback.format_exc(),
                "communication": isinstance(exc, (RuntimeError, dist.DistBackendError))
                and world > 1,
            }
