"""Behaviour cloning: the warm start that PPO starts from.

* :func:`collect_demonstrations` drives the env with a heuristic scheduler (the teacher),
  or with the clone while the teacher labels (DAgger), and records obs, actions and
  returns-to-go.
* :func:`pretrain` fits a ``MaraNet`` to them (cross-entropy on the teacher's actions,
  critic regression on the undiscounted returns) stage by stage, saving each stage, and
  writes the state dict every PPO module loads at setup.  :data:`PRETRAIN_SECTIONS` are
  the experiment sections the stages depend on.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flow_predictor.wrapper import make_wrapped_env
from mara_agents.policy.network import MASKED_LOGIT, MaraNet, ObsLayout, model_config_from
from mara_agents.training.experiment import Experiment
from mara_agents.training.records import check_inputs, check_out, check_unchanged, write_record

# What the warm start depends on: a change to any of these makes its saved stages stale.
PRETRAIN_SECTIONS = ("seed", "env", "wrapper", "wrapper_options", "model", "pretrain")


def demonstration_seeds(root: int, stage: int, episodes: int) -> list[int]:
    """Episode seeds of cloning stage ``stage`` (0: the teacher's episodes, ``r``: DAgger
    round ``r``): one :class:`numpy.random.SeedSequence` stream per stage, as
    :mod:`mara_agents.training.group` seeds its envs, so stages share no seeds however
    many episodes each has (offsets such as ``20_000 + 1_000 * r`` overlap past 1,000)."""
    # 64-bit words: among 100,000 seeds two equal 32-bit words are likely (birthday bound).
    state = np.random.SeedSequence([root, stage]).generate_state(episodes, np.uint64)
    return [int(s) for s in state]


def collect_demonstrations(
    exp: Experiment, seeds: Sequence[int], policy: MaraNet | None = None
) -> dict[str, np.ndarray]:
    """Per-step obs, the teacher's actions and returns-to-go from an env episode per seed.

    Without ``policy`` the teacher (``exp.pretrain.scheduler``) acts; with one (DAgger)
    the policy acts greedily, the teacher only labels the states the policy reaches, and
    ``"taken"`` holds the policy's own actions.
    """
    from mara_agents.evaluation.registry import make_scheduler
    from mara_env.schedulers import SchedulerAgent

    env = make_wrapped_env(exp.env_config())
    # The spec was checked when the experiment was parsed.
    agent = SchedulerAgent(make_scheduler(exp.pretrain.scheduler))
    obs, masks, states, actions, taken, targets = [], [], [], [], [], []
    for seed in seeds:
        env.reset(seed=seed)
        agent.reset(env, seed)
        rounds: list[int] = []  # round index of each recorded step
        rewards: list[float] = []  # team reward of each round
        for name in env.agent_iter():
            o, _, term, trunc, _ = env.last()
            if term or trunc:
                env.step(None)
                continue
            if name == env.possible_agents[0]:
                rewards.append(0.0)
            a = agent.act(env, name)
            obs.append(o["observation"])
            masks.append(o["action_mask"])
            states.append(o["state"])
            actions.append(a)
            rounds.append(len(rewards) - 1)
            if policy is not None:
                with torch.no_grad():
                    x = torch.from_numpy(o["observation"])[None]
                    a = int(policy.logits(x, torch.from_numpy(o["action_mask"])[None]).argmax())
                taken.append(a)
            env.step(a)
            if name == env.possible_agents[-1]:
                rewards[-1] = float(env.rewards[name])
        to_go = np.cumsum(np.asarray(rewards)[::-1])[::-1]
        targets.append(to_go[np.asarray(rounds)])
    data = {
        "obs": np.asarray(obs, np.float32),
        "mask": np.asarray(masks, np.float32),
        "state": np.asarray(states, np.float32),
        "action": np.asarray(actions, np.int64),
        "return": np.concatenate(targets).astype(np.float32),
    }
    if policy is not None:
        data["taken"] = np.asarray(taken, np.int64)  # the policy's own (executed) actions
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
                err = (net.value(t["state"][idx]) - t["return"][idx]) / net.config.value_scale
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
    data so far.  With ``resume`` a finished stage's file is loaded instead of refitting
    (its demonstrations are collected again: they are deterministic given the seeds), once
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
    t0 = time.time()
    data = collect_demonstrations(exp, demonstration_seeds(exp.seed, 0, cfg.episodes))
    log(
        f"pretrain: {len(data['action'])} steps from {cfg.episodes} episodes "
        f"of {cfg.scheduler} in {time.time() - t0:.0f}s"
    )
    layout = ObsLayout.infer(data["obs"].shape[1], data["state"].shape[1], data["mask"].shape[1])
    torch.manual_seed(exp.seed)
    net = MaraNet(layout, model_config_from(exp.model))
    out.parent.mkdir(parents=True, exist_ok=True)

    def stage(path: Path, fit: Any) -> None:
        if resume and path.is_file():
            net.load_state_dict(torch.load(path, weights_only=True))
            log(f"pretrain: resumed {path}")
        else:
            fit()
            torch.save(net.state_dict(), path)

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
        data = {k: np.concatenate([data[k], new[k]]) for k in data}
        stage(
            out.with_name(f"{out.stem}_dagger{r + 1}.pt"),
            functools.partial(
                _fit, net, data, cfg.dagger_epochs, cfg.dagger_epochs, exp, log, "dagger"
            ),
        )
    torch.save(net.state_dict(), out)
    return out
