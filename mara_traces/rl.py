"""RL traces: A2C, PPO and DQN on Gymnasium envs; loss = 1 - normalised return.

Classic control (CartPole, Acrobot: the shipped "v1" config stream) and toy text
(FrozenLake with one-hot observations: the train-only extension stream "x1").

The logged loss is ``1 - (R - lo) / (hi - lo)`` clipped to [0, 1], where ``R`` is the mean
return of the last :data:`RETURN_WINDOW` finished episodes and [lo, hi] the env's return
range; ``step`` counts environment steps.  Logging starts once an episode has finished.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch
from gymnasium.envs.toy_text.frozen_lake import generate_random_map
from torch import nn

from mara_traces.common import log_uniform, make_optimizer, mlp

RETURN_RANGE = {
    "CartPole-v1": (0.0, 500.0),
    "Acrobot-v1": (-500.0, 0.0),
    "FrozenLake-v1": (0.0, 1.0),  # return = reached the goal; loss = 1 - success rate
    # v2 environments: [lo, hi] runs from about a random policy's return to a good one's.
    "CliffWalking-v1": (-1000.0, -13.0),  # 200-step limit; -13 is the shortest safe path
    "Taxi-v3": (-800.0, 8.0),  # random ~ -770 (illegal pick-ups cost 10); optimal ~ +8
    "LunarLander-v3": (-400.0, 250.0),  # random ~ -180; 200 counts as solved
    "MiniGrid-Empty-5x5-v0": (0.0, 1.0),  # 1 - 0.9 * steps / max_steps on success, else 0
    "MiniGrid-Dynamic-Obstacles-5x5-v0": (-1.0, 1.0),  # -1: hit an obstacle
}
RETURN_WINDOW = 20
# Sampling weight of each (env, algorithm); a split's pairs sum to its share
# (train 0.70, val 0.15, test 0.15 under mara_traces.splits.SPLIT_RULES).
RUN_WEIGHTS = {
    ("CartPole-v1", "a2c"): 0.35,
    ("CartPole-v1", "ppo"): 0.35,
    ("CartPole-v1", "dqn"): 0.15,
    ("Acrobot-v1", "a2c"): 0.075,
    ("Acrobot-v1", "ppo"): 0.075,
}
# Environment steps per run (before ``budget``): Acrobot steps cost ~8x CartPole's, and a
# vector step costs about the same whatever the number of envs, so runs use many envs.
ENV_STEPS = {
    ("CartPole-v1", "dqn"): (6_000, 12_000),
    "CartPole-v1": (15_000, 40_000),
    "Acrobot-v1": (8_000, 20_000),
    "FrozenLake-v1": (15_000, 45_000),  # 4x4; x map side / 4 for bigger lakes
    "CliffWalking-v1": (15_000, 40_000),
    "Taxi-v3": (30_000, 80_000),
    "LunarLander-v3": (40_000, 90_000),
    "MiniGrid-Empty-5x5-v0": (8_000, 20_000),
    "MiniGrid-Dynamic-Obstacles-5x5-v0": (10_000, 30_000),
}
# Extension stream "x1": more environments for the TRAIN split only.  Its configs come from
# their own random stream and trace ids (``rl-x1-s<seed>-<i>``), so the shipped "v1" draws
# stay identical.  No dqn here: algorithm dqn is held out as the val split.
EXTRA_RUN_WEIGHTS = {
    ("FrozenLake-v1", "a2c"): 0.5,
    ("FrozenLake-v1", "ppo"): 0.5,
}
# Stream "v2" (trace library v2): six more environments, each in exactly one split
# (mara_traces.splits), each with all three algorithm kinds.  Validation and test each get
# environments that no earlier library or evaluation used.
V2_ENVS = {
    "FrozenLake-v1": 0.15,  # train
    "CliffWalking-v1": 0.15,  # train
    "Taxi-v3": 0.175,  # val
    "MiniGrid-Dynamic-Obstacles-5x5-v0": 0.175,  # val
    "LunarLander-v3": 0.175,  # test
    "MiniGrid-Empty-5x5-v0": 0.175,  # test
}
V2_ALGOS = {"a2c": 0.35, "ppo": 0.4, "dqn": 0.25}
V2_RUN_WEIGHTS = {(e, a): we * wa for e, we in V2_ENVS.items() for a, wa in V2_ALGOS.items()}
STREAMS = {"v1": RUN_WEIGHTS, "x1": EXTRA_RUN_WEIGHTS, "v2": V2_RUN_WEIGHTS}
MINIGRID_PREFIX = "MiniGrid-"
EPISODE_LIMIT = {"CliffWalking-v1": 200}  # gymnasium registers no time limit for it


def env_kwargs(cfg: dict) -> dict:
    """``gym.make`` keyword arguments of a config (FrozenLake map and slipperiness)."""
    kwargs: dict = {}
    if "mapseed" in cfg:
        size = int(cfg["map"].split("x")[0])
        kwargs["desc"] = generate_random_map(size=size, seed=int(cfg["mapseed"]))
    elif "map" in cfg:
        kwargs["map_name"] = cfg["map"]
    if "slip" in cfg:
        kwargs["is_slippery"] = bool(cfg["slip"])
    return kwargs


def _minigrid_obs(env: gym.Env) -> gym.Env:
    """MiniGrid's 7x7x3 egocentric view, flattened and scaled to [0, 1]."""
    from minigrid.wrappers import ImgObsWrapper

    flat = gym.wrappers.FlattenObservation(ImgObsWrapper(env))
    space = gym.spaces.Box(0.0, 1.0, flat.observation_space.shape, np.float32)
    return gym.wrappers.TransformObservation(flat, lambda o: o.astype(np.float32) / 10.0, space)


def make_env(env_id: str, num_envs: int, seed: int, **kwargs) -> gym.vector.VectorEnv:
    """A vectorised env (numpy-vectorised CartPole where gymnasium has one)."""
    mode = "vector_entry_point" if env_id == "CartPole-v1" else "sync"
    wrappers = None
    if env_id.startswith(MINIGRID_PREFIX):
        import minigrid  # noqa: F401  (registers the MiniGrid ids)

        wrappers = [_minigrid_obs]
    if env_id in EPISODE_LIMIT:
        kwargs["max_episode_steps"] = EPISODE_LIMIT[env_id]
    env = gym.make_vec(
        env_id, num_envs=num_envs, vectorization_mode=mode, wrappers=wrappers, **kwargs
    )
    env.reset(seed=seed)
    env.action_space.seed(seed)
    return env


class ReturnTracker:
    """Per-env episode returns under next-step autoreset; the loss of recent episodes."""

    def __init__(self, num_envs: int, env_id: str):
        self.running = np.zeros(num_envs)
        self.finished: list[float] = []
        self.lo, self.hi = RETURN_RANGE[env_id]

    def update(self, reward: np.ndarray, done: np.ndarray) -> None:
        self.running += reward
        self.finished.extend(self.running[done].tolist())
        self.running[done] = 0.0

    def loss(self) -> float | None:
        """1 - normalised mean return of the last episodes; None before any finished."""
        if not self.finished:
            return None
        ret = float(np.mean(self.finished[-RETURN_WINDOW:]))
        return float(np.clip(1.0 - (ret - self.lo) / (self.hi - self.lo), 0.0, 1.0))


def obs_encoder(space: gym.Space) -> tuple[int, Callable[[np.ndarray], np.ndarray]]:
    """Network input size and encoder: Box observations as they are, Discrete one-hot."""
    if isinstance(space, gym.spaces.Discrete):
        eye = np.eye(int(space.n), dtype=np.float32)
        return int(space.n), lambda obs: eye[np.asarray(obs) - int(space.start)]
    return int(space.shape[0]), lambda obs: obs


def _sample_actions(logits: torch.Tensor) -> torch.Tensor:
    # Gumbel-max: a categorical draw without torch.distributions' per-call overhead.
    u = torch.rand_like(logits).clamp_(1e-9, 1.0)
    return (logits - torch.log(-torch.log(u))).argmax(-1)


def _env_variant(rng: np.random.Generator, env_id: str) -> tuple[dict, float]:
    """Extension streams: the env's variant fields and its env-step multiplier."""
    if env_id != "FrozenLake-v1":
        return {}, 1.0
    kind = str(rng.choice(["4x4", "8x8", "random"], p=[0.35, 0.3, 0.35]))
    size = int(rng.choice([5, 6, 7])) if kind == "random" else int(kind[0])
    fields: dict = {"map": f"{size}x{size}"}
    if kind == "random":  # gymnasium's generate_random_map (frozen prob 0.8), seeded
        fields["mapseed"] = int(rng.integers(10_000))
    fields["slip"] = int(rng.random() < 0.4)
    return fields, size / 4  # bigger lakes need longer runs


def sample_config(rng: np.random.Generator, budget: float = 1.0, stream: str = "v1") -> dict:
    """One run's env, algorithm and hyper-parameters (``budget`` scales points and steps).

    ``stream`` picks the (env, algorithm) weights from :data:`STREAMS`; stream ``v1`` draws
    exactly what it drew before the extension streams existed.
    """
    run_weights = STREAMS[stream]
    pairs = list(run_weights)
    weights = np.array(list(run_weights.values()))
    env_id, algo = pairs[int(rng.choice(len(pairs), p=weights / weights.sum()))]
    variant, scale = _env_variant(rng, env_id) if stream != "v1" else ({}, 1.0)
    lo, hi = ENV_STEPS.get((env_id, algo), ENV_STEPS[env_id])
    points = max(12, int(rng.integers(105, 141) * budget))
    total = int(rng.uniform(lo, hi) * scale * budget)
    width, depth = int(rng.choice([16, 32, 64])), int(rng.choice([1, 2]))
    cfg: dict = {"env": env_id, **variant, "algo": algo, "model": f"mlp-{width}x{depth}"}
    if algo == "dqn":
        envs = 4  # one gradient step per vector step: with many envs it barely learns
    elif env_id == "CartPole-v1":
        envs = 16  # the numpy-vectorised step costs about the same for any number of envs
    else:
        envs = int(rng.choice([8, 16]))
    if algo == "dqn":
        cfg |= {
            "opt": "adam",
            "lr": log_uniform(rng, 3e-4, 3e-3),
            "envs": envs,
            "bs": int(rng.choice([32, 64])),
            "target": int(rng.choice([100, 250, 500])),
            **({"train_every": int(rng.choice([2, 4]))} if stream == "v2" else {}),
            "explore": round(rng.uniform(0.1, 0.5), 2),
            "gamma": 0.99,
        }
        per_point = envs
    else:
        # The longest rollout within one logging interval: few updates per env step keep
        # runs cheap, and every run still logs `points` times.
        horizon = max([h for h in (8, 16, 32, 64) if envs * h <= total / points] or [8])
        cfg |= {
            "opt": str(rng.choice(["adam", "rmsprop"])),
            "lr": log_uniform(rng, 5e-4, 1e-2),
            "envs": envs,
            "horizon": horizon,
            "gamma": float(rng.choice([0.95, 0.98, 0.99])),
            "lam": float(rng.choice([0.9, 0.95, 1.0])),
            "ent": float(rng.choice([0.0, 0.01])),
        }
        if algo == "ppo":
            cfg |= {"epochs": int(rng.choice([2, 3])), "clip": 0.2}
        per_point = envs * horizon
    cfg |= {
        "points": points,
        "every": max(1, round(total / points / per_point)),
        "seed": int(rng.integers(10_000)),
    }
    return cfg


def run(cfg: dict) -> tuple[np.ndarray, np.ndarray]:
    """Train the configured agent; (env steps, 1 - normalised smoothed return) per point."""
    torch.manual_seed(cfg["seed"])
    env = make_env(cfg["env"], cfg["envs"], cfg["seed"], **env_kwargs(cfg))
    try:
        train = _dqn if cfg["algo"] == "dqn" else _actor_critic
        return train(cfg, env)
    finally:
        env.close()


def _net(cfg: dict, n_in: int, n_out: int) -> nn.Sequential:
    width, depth = (int(v) for v in cfg["model"][4:].split("x"))
    return mlp(n_in, width, depth, n_out, nn.Tanh)


def _actor_critic(cfg: dict, env: gym.vector.VectorEnv) -> tuple[np.ndarray, np.ndarray]:
    """A2C (one gradient step per rollout) or PPO (clipped, several epochs) with GAE."""
    n, horizon = cfg["envs"], cfg["horizon"]
    obs_dim, encode = obs_encoder(env.single_observation_space)
    n_act = env.single_action_space.n
    actor, critic = _net(cfg, obs_dim, n_act), _net(cfg, obs_dim, 1)
    optim = make_optimizer(cfg["opt"], [*actor.parameters(), *critic.parameters()], cfg["lr"])
    tracker = ReturnTracker(n, cfg["env"])
    obs = torch.as_tensor(encode(env.reset(seed=cfg["seed"])[0]), dtype=torch.float32)
    prev_done = np.zeros(n, bool)
    steps, losses = [], []
    env_steps, iteration = 0, 0
    buf_obs = torch.zeros(horizon, n, obs_dim)
    buf_act = torch.zeros(horizon, n, dtype=torch.long)
    rew, done, valid = (np.zeros((horizon, n)) for _ in range(3))
    while len(losses) < cfg["points"]:
        for t in range(horizon):
            with torch.no_grad():
                act = _sample_actions(actor(obs))
            next_obs, r, term, trunc, _ = env.step(act.numpy())
            # Next-step autoreset: the step after an episode ends only resets that env.
            valid[t], d = ~prev_done, term | trunc
            buf_obs[t], buf_act[t], rew[t], done[t] = obs, act, r, d
            tracker.update(r, d & ~prev_done)
            prev_done = d
            obs = torch.as_tensor(encode(next_obs), dtype=torch.float32)
        with torch.no_grad():
            values = critic(buf_obs).squeeze(-1).numpy()
            last = critic(obs).squeeze(-1).numpy()
        adv = np.zeros((horizon, n))
        running = np.zeros(n)
        for t in reversed(range(horizon)):
            next_v = last if t == horizon - 1 else values[t + 1]
            keep = 1.0 - done[t]
            delta = rew[t] + cfg["gamma"] * next_v * keep - values[t]
            running = delta + cfg["gamma"] * cfg["lam"] * keep * running
            adv[t] = running
        mask = torch.as_tensor(valid.ravel(), dtype=torch.bool)
        b_obs, b_act = buf_obs.reshape(-1, obs_dim)[mask], buf_act.ravel()[mask]
        b_adv = torch.as_tensor(adv.ravel(), dtype=torch.float32)[mask]
        b_ret = b_adv + torch.as_tensor(values.ravel(), dtype=torch.float32)[mask]
        with torch.no_grad():
            old_logp = torch.log_softmax(actor(b_obs), -1).gather(1, b_act[:, None]).squeeze(1)
        for _ in range(cfg.get("epochs", 1)):
            logp_all = torch.log_softmax(actor(b_obs), -1)
            logp = logp_all.gather(1, b_act[:, None]).squeeze(1)
            norm_adv = (b_adv - b_adv.mean()) / (b_adv.std() + 1e-8)
            if cfg["algo"] == "ppo":
                ratio = torch.exp(logp - old_logp)
                clipped = ratio.clamp(1 - cfg["clip"], 1 + cfg["clip"])
                pg_loss = -torch.min(ratio * norm_adv, clipped * norm_adv).mean()
            else:
                pg_loss = -(logp * norm_adv).mean()
            entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
            v_loss = ((critic(b_obs).squeeze(-1) - b_ret) ** 2).mean()
            optim.zero_grad(set_to_none=True)
            (pg_loss + 0.5 * v_loss - cfg["ent"] * entropy).backward()
            nn.utils.clip_grad_norm_([*actor.parameters(), *critic.parameters()], 0.5)
            optim.step()
        env_steps += n * horizon
        iteration += 1
        if iteration % cfg["every"] == 0 and (loss := tracker.loss()) is not None:
            steps.append(env_steps)
            losses.append(loss)
    return np.asarray(steps, np.float64), np.asarray(losses)


def _dqn(cfg: dict, env: gym.vector.VectorEnv) -> tuple[np.ndarray, np.ndarray]:
    """DQN with a replay buffer, a hard-updated target net and linear epsilon decay."""
    n = cfg["envs"]
    obs_dim, encode = obs_encoder(env.single_observation_space)
    n_act = env.single_action_space.n
    qnet = _net(cfg, obs_dim, n_act)
    target = copy.deepcopy(qnet)
    optim = make_optimizer(cfg["opt"], qnet.parameters(), cfg["lr"])
    rng = np.random.default_rng(cfg["seed"])
    cap = 50_000
    b_obs, b_next = np.zeros((cap, obs_dim), np.float32), np.zeros((cap, obs_dim), np.float32)
    b_act, b_rew, b_term = (
        np.zeros(cap, np.int64),
        np.zeros(cap, np.float32),
        np.zeros(cap, np.float32),
    )
    size = pos = 0
    tracker = ReturnTracker(n, cfg["env"])
    obs = encode(env.reset(seed=cfg["seed"])[0]).astype(np.float32)
    prev_done = np.zeros(n, bool)
    # Exploration decays over the first `explore` fraction of the expected run length.
    decay_steps = cfg["explore"] * cfg["points"] * cfg["every"] * 1.2
    steps, losses = [], []
    it, grad_steps = 0, 0
    while len(losses) < cfg["points"]:
        eps = max(0.05, 1.0 - 0.95 * it / decay_steps)
        with torch.no_grad():
            greedy = qnet(torch.as_tensor(obs)).argmax(-1).numpy()
        act = np.where(rng.random(n) < eps, rng.integers(0, n_act, n), greedy)
        next_obs, r, term, trunc, _ = env.step(act)
        next_obs = encode(next_obs)
        real = ~prev_done
        k = int(real.sum())
        idx = (pos + np.arange(k)) % cap
        b_obs[idx], b_next[idx], b_act[idx] = obs[real], next_obs[real], act[real]
        b_rew[idx], b_term[idx] = r[real], term[real]
        pos, size = (pos + k) % cap, min(cap, size + k)
        tracker.update(r, (term | trunc) & real)
        prev_done = term | trunc
        obs = next_obs.astype(np.float32)
        it += 1
        if size >= 200 and it % cfg.get("train_every", 1) == 0:
            j = rng.integers(0, size, cfg["bs"])
            with torch.no_grad():
                q_next = target(torch.as_tensor(b_next[j])).max(-1).values
                y = (
                    torch.as_tensor(b_rew[j])
                    + cfg["gamma"] * (1 - torch.as_tensor(b_term[j])) * q_next
                )
            q = (
                qnet(torch.as_tensor(b_obs[j]))
                .gather(1, torch.as_tensor(b_act[j])[:, None])
                .squeeze(1)
            )
            loss = nn.functional.smooth_l1_loss(q, y)
            optim.zero_grad(set_to_none=True)
            loss.backward()
            optim.step()
            grad_steps += 1
            if grad_steps % cfg["target"] == 0:
                target.load_state_dict(qnet.state_dict())
        if it % cfg["every"] == 0 and (point := tracker.loss()) is not None:
            steps.append(it * n)
            losses.append(point)
    return np.asarray(steps, np.float64), np.asarray(losses)
