"""Behaviour cloning: the warm start that PPO starts from.

* :func:`collect_demonstrations` plays episodes with the harness's episode loop, the
  heuristic scheduler (the teacher) acting, or the clone while the teacher labels
  (DAgger), and records every node's obs, the teacher's actions and returns-to-go.
* :func:`pretrain` fits a ``MaraNet`` to them (cross-entropy on the teacher's actions,
  critic regression on the undiscounted returns) stage by stage, saving each stage, and
  writes the state dict every PPO module loads at setup.  :data:`PRETRAIN_SECTIONS` are
  the experiment sections the stages depend on.
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mara_agents.planning.history import ClusterHistory
from mara_agents.policy.features import make_wrapped_env
from mara_agents.policy.network import MASKED_LOGIT, MaraNet, ObsLayout, model_config_from
from mara_agents.policy.policy_file import warm_start_weights
from mara_agents.training.experiment import Experiment
from mara_agents.training.records import check_inputs, check_out, check_unchanged, write_record

# What the warm start depends on: a change to any of these makes its saved stages stale.
PRETRAIN_SECTIONS = ("seed", "env", "wrapper", "wrapper_options", "model", "pretrain")


def env_layout(env: Any) -> ObsLayout:
    """The layout of the observations ``env`` (an experiment's wrapped env) shows a node."""
    space = env.observation_space(env.possible_agents[0])
    k = env.unwrapped.engine.config.num_slots
    return ObsLayout.infer(space["observation"].shape[0], space["state"].shape[0], k + 1)


def demonstration_seeds(root: int, stage: int, episodes: int) -> list[int]:
    """Episode seeds of cloning stage ``stage`` (0: the teacher's episodes, ``r``: DAgger
    round ``r``): one :class:`numpy.random.SeedSequence` stream per stage, as
    :mod:`mara_agents.training.group` seeds its envs, so stages share no seeds however
    many episodes each has (offsets such as ``20_000 + 1_000 * r`` overlap past 1,000)."""
    # 64-bit words: among 100,000 seeds two equal 32-bit words are likely (birthday bound).
    state = np.random.SeedSequence([root, stage]).generate_state(episodes, np.uint64)
    return [int(s) for s in state]


class _Demonstrator:
    """The round agent behaviour cloning plays episodes with: the teacher acts (or, for
    DAgger, the clone acts greedily and the teacher labels), and every node's observation
    (as the AEC env shows it, given the earlier nodes' actions) is recorded with the
    teacher's action."""

    def __init__(
        self, teacher: Any, layout: ObsLayout, policy: MaraNet | None, consistent: bool = False
    ) -> None:
        self.teacher, self.layout, self.policy = teacher, layout, policy
        self.consistent = consistent
        self.rounds: Any = None
        k, obs = layout.num_slots, layout.obs_dim
        # each starts with no rows of its width: an episode may have no round
        self.steps: dict[str, list[np.ndarray]] = {
            "obs": [np.zeros((0, obs), np.float32)],
            "mask": [np.zeros((0, k + 1), np.int8)],
            # a node's state is its observation and the queue: only the queue is kept
            "queue": [np.zeros((0, layout.state_extra), np.float32)],
            "action": [np.zeros(0, np.int64)],
            "taken": [np.zeros(0, np.int64)],
        }

    def reset(self, env: Any, seed: int) -> None:
        from mara_env.round_env import RoundEnv

        self.teacher.reset(env, seed)
        self.rounds = RoundEnv(env)

    def act_round(self, env: Any) -> np.ndarray:
        from mara_agents.policy.rounds import decode, flat_views, round_features

        obs = {k: torch.from_numpy(np.asarray(v))[None] for k, v in self.rounds.observe().items()}
        labels = np.asarray(self.teacher.act_round(env), np.int64)
        with torch.no_grad():
            taken = (
                torch.from_numpy(labels)[None]
                if self.policy is None
                else decode(self.policy, obs, greedy=True)[0]
            )
            feats, mask = round_features(obs, taken, self.layout.num_slots)
            flat = flat_views(obs, feats, self.layout)[0]
        steps = self.steps
        steps["obs"].append(flat.numpy())
        steps["mask"].append(mask[0].numpy())
        steps["queue"].append(obs["queue"].expand(len(flat), -1).numpy())
        if self.consistent and self.policy is not None:
            labels = consistent_labels(
                labels, taken[0].numpy(), obs["node_slot"][0].numpy(), self.layout.num_slots
            )
        steps["action"].append(labels)
        steps["taken"].append(taken[0].numpy())
        return steps["taken"][-1]


def consistent_labels(
    labels: np.ndarray, taken: np.ndarray, node_slot: np.ndarray, k: int
) -> np.ndarray:
    """The teacher's round-start ``labels`` ``(N,)`` (slot, or ``k`` for idle) made
    consistent with the actions the clone ``taken`` before each node.  A node keeps its
    label unless the earlier nodes already gave that slot all the nodes the teacher's
    allocation gives it, or the label is idle while a slot wants more nodes than the
    later nodes' labels bring it.  Then it stays on the slot it served (``node_slot``,
    ``-1``: none) if that one still wants nodes, else goes to the slot short of the most,
    else idles.  Without a deviation before it a node keeps its label, so a clone that
    follows the labels realises the teacher's allocation."""
    want = np.bincount(labels, minlength=k + 1)[:k]
    chosen = np.zeros(k, np.int64)
    later = want.copy()  # per slot, the labels of this node and the ones after it
    out = labels.copy()
    for i, (label, mine, act) in enumerate(zip(labels, node_slot, taken, strict=True)):
        if label < k:
            later[label] -= 1
        short = want - chosen - later  # what the later labels leave unfilled
        if (label < k and chosen[label] >= want[label]) or (label == k and short.max() > 0):
            if mine >= 0 and chosen[mine] < want[mine]:
                out[i] = mine
            else:
                out[i] = int(short.argmax()) if short.max() > 0 else k
        if act < k:
            chosen[act] += 1
    return out


def collect_demonstrations(
    exp: Experiment,
    seeds: Sequence[int],
    policy: MaraNet | None = None,
    workers: int | None = None,
) -> dict[str, np.ndarray]:
    """Per-step obs, queue summary (the rest of a node's state), the teacher's actions and
    returns-to-go from an env episode per seed,
    played by the harness's episode loop (:func:`mara_env.round_env.play_episode`).

    Without ``policy`` the teacher (``exp.pretrain.scheduler``) acts; with one (DAgger)
    the policy acts greedily, the teacher only labels the states the policy reaches, and
    ``"taken"`` holds the policy's own actions.

    ``workers`` processes (default: one per core, at most one per seed) each play a run of
    consecutive seeds; the arrays are joined in seed order, so the data do not depend on
    ``workers`` (every episode is seeded on its own).  The cluster's history is built here,
    once, where ``exp`` does not hold it and its teacher or features read one, and handed
    to every worker.
    """
    from mara_agents.evaluation.runner import history_readers

    if exp.history is None and history_readers(exp.schedulers):
        exp = dataclasses.replace(exp, history=ClusterHistory.of(exp.env))
    workers = min(len(seeds), workers or os.cpu_count() or 1)
    if workers <= 1:
        return _collect(exp, seeds, policy)
    runs = [list(run) for run in np.array_split(np.asarray(seeds, dtype=object), workers)]
    spawn = multiprocessing.get_context("spawn")  # no forked torch or BLAS thread state
    with ProcessPoolExecutor(workers, mp_context=spawn) as pool:
        parts = list(pool.map(_collect, [exp] * workers, runs, [policy] * workers))
    return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}


def _collect(
    exp: Experiment, seeds: Sequence[int], policy: MaraNet | None
) -> dict[str, np.ndarray]:
    """:func:`collect_demonstrations` in this process."""
    from mara_agents.evaluation.runner import build
    from mara_env.round_env import play_episode
    from mara_env.schedulers import SchedulerAgent

    config = exp.env_config()
    env = make_wrapped_env(config)
    layout = env_layout(env)
    # The spec was checked when the experiment was parsed.
    teacher = SchedulerAgent(build(exp.pretrain.scheduler, exp.history))
    consistent = exp.pretrain.dagger_labels == "consistent"
    agent = _Demonstrator(teacher, layout, policy, consistent)
    targets = []
    for seed in seeds:
        rewards = play_episode(agent, env, seed)
        to_go = np.cumsum(np.asarray(rewards)[::-1])[::-1]
        targets.append(np.repeat(to_go, env.unwrapped.engine.config.num_nodes))
    steps = {key: np.concatenate(v) for key, v in agent.steps.items()}
    data = {
        "obs": steps["obs"].astype(np.float32),
        "mask": steps["mask"].astype(np.float32),
        "queue": steps["queue"].astype(np.float32),
        "action": steps["action"].astype(np.int64),
        "return": np.concatenate(targets).astype(np.float32),
    }
    if policy is not None:
        data["taken"] = steps["taken"].astype(np.int64)  # the policy's own (executed) actions
    return data


def _fit(
    net: MaraNet,
    data: dict[str, np.ndarray],
    epochs: int,
    value_epochs: int,
    exp: Experiment,
    log: Any,
    stage: str,
) -> None:
    """Cross-entropy on the teacher's actions and critic regression, minibatch Adam."""
    cfg = exp.pretrain
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    t = {k: torch.from_numpy(v) for k, v in data.items()}
    n = len(t["action"])
    if not n:  # episodes without a round (no task arrived): no decision to clone
        log(f"{stage}: no steps to fit")
        return
    gen = torch.Generator().manual_seed(exp.seed)
    for epoch in range(max(epochs, value_epochs)):
        perm = torch.randperm(n, generator=gen)
        total, correct = 0.0, 0
        for i in range(0, n, cfg.batch_size):
            idx = perm[i : i + cfg.batch_size]
            loss = torch.zeros(())
            if epoch < epochs:
                logits = net.logits(t["obs"][idx], t["mask"][idx])
                target = t["action"][idx]
                # Demonstrations the policy cannot take (idling while a slot is valid,
                # under work_conserving) would dominate the loss: clone the others only.
                ok = logits.gather(1, target[:, None]).squeeze(1) > MASKED_LOGIT / 2
                if ok.any():
                    loss = torch.nn.functional.cross_entropy(logits[ok], target[ok])
                correct += int((logits.argmax(-1) == target).sum())
            if epoch < value_epochs:
                state = torch.cat([t["obs"][idx], t["queue"][idx]], -1)
                err = (net.value(state) - t["return"][idx]) / net.config.value_scale
                loss = loss + 0.5 * (err**2).mean()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            total += loss.item() * len(idx)
        accuracy = f"  action accuracy {correct / n:.3f}" if epoch < epochs else " (critic only)"
        log(f"{stage} epoch {epoch + 1}: loss {total / n:.4f}{accuracy}")


def pretrain(exp: Experiment, out: Path, log: Any = None, resume: bool = False) -> Path:
    """Behaviour-clone ``exp.pretrain.scheduler`` into a ``MaraNet`` state dict at ``out``.

    Stages: behaviour cloning on the teacher's episodes (``<out>_bc.pt``), then
    ``dagger_rounds`` DAgger rounds (``<out>_dagger<r>.pt``): the clone drives
    ``dagger_episodes`` episodes, the teacher labels them, and the net is refit on all
    data so far.  With ``init_weights`` (and ``episodes: 0``) there is no cloning stage:
    the rounds start from those weights (a trained policy fine-tuned on its own mistakes,
    e.g. on another workload or cluster size), and fit on the rounds' data alone.

    With ``resume`` a finished stage's file is loaded instead of refitting (its
    demonstrations are collected again: they are deterministic given the seeds), once
    the experiment is found unchanged since those stages ran (``<out>.yaml`` records it).
    Only ``dagger_rounds`` may change on resume: a round depends on the stages before it
    alone, so more rounds continue from the last one saved.
    """
    log = log or functools.partial(print, flush=True)
    cfg = exp.pretrain
    out = check_out(Path(out).parent) / Path(out).name
    check_inputs(exp)
    record = out.with_suffix(".yaml")
    if resume:
        check_unchanged(exp, record, free=("pretrain.dagger_rounds",))
    write_record(exp, record, sections=PRETRAIN_SECTIONS)
    data: dict[str, np.ndarray] | None = None
    if not cfg.init_weights:
        t0 = time.time()
        data = collect_demonstrations(exp, demonstration_seeds(exp.seed, 0, cfg.episodes))
        log(
            f"pretrain: {len(data['action'])} steps from {cfg.episodes} episodes "
            f"of {cfg.scheduler} in {time.time() - t0:.0f}s"
        )
    layout = env_layout(make_wrapped_env(exp.env_config()))
    torch.manual_seed(exp.seed)
    net = MaraNet(layout, model_config_from(exp.model))
    if cfg.init_weights:
        net.warm_start(warm_start_weights(cfg.init_weights))
        log(f"pretrain: DAgger from {cfg.init_weights}")
    out.parent.mkdir(parents=True, exist_ok=True)

    def stage(path: Path, fit: Any) -> None:
        if resume and path.is_file():
            net.load_state_dict(torch.load(path, weights_only=True))
            log(f"pretrain: resumed {path}")
        else:
            fit()
            torch.save(net.state_dict(), path)

    if data is not None:
        stage(
            out.with_name(out.stem + "_bc.pt"),
            functools.partial(_fit, net, data, cfg.epochs, cfg.value_epochs, exp, log, "pretrain"),
        )
    for r in range(cfg.dagger_rounds):
        t0 = time.time()
        net.eval()
        seeds = demonstration_seeds(exp.seed, r + 1, cfg.dagger_episodes)
        new = collect_demonstrations(exp, seeds, policy=net)
        net.train()
        agree = float(np.mean(new["action"] == new.pop("taken")))
        log(
            f"dagger round {r + 1}: {len(new['action'])} steps from {cfg.dagger_episodes} "
            f"episodes driven by the clone in {time.time() - t0:.0f}s; "
            f"clone agrees with {cfg.scheduler} on {agree:.3f} of them"
        )
        data = new if data is None else {k: np.concatenate([data[k], new[k]]) for k in data}
        stage(
            out.with_name(f"{out.stem}_dagger{r + 1}.pt"),
            functools.partial(
                _fit, net, data, cfg.dagger_epochs, cfg.dagger_epochs, exp, log, "dagger"
            ),
        )
    torch.save(net.state_dict(), out)
    return out
