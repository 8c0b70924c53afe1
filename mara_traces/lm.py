"""Language-model traces: byte-level causal transformers and LSTMs on Python's own text.

Every machine with Python has the corpora: the standard library's source code and its
documentation (``pydoc_data.topics`` and the docstrings of stdlib modules).  Each corpus is
split 90 / 10 into training and held-out text; the logged loss is the **held-out
cross-entropy** in nats per byte (a fixed set of held-out windows, evaluated at every logged
point), the way a real language-model job reports validation loss; ``step`` counts optimiser
steps of a fixed batch.  Runs use the schedules real jobs use: warm-up + cosine, step decay,
constant and inverse square root.

The text depends on the Python version that collects it (the standard library changes), so a
library collected on another version has other, equally real, curves.
"""

from __future__ import annotations

import ast
import functools
import math
import sysconfig
from pathlib import Path

import numpy as np
import torch
from torch import nn

from mara_traces.common import log_uniform, lr_factor, make_optimizer, weighted_choice

VOCAB = 256  # bytes
HELD_OUT = 0.1  # last fraction of each corpus
EVAL_WINDOWS = 8  # held-out windows per logged point
# corpus -> (kind, stdlib packages/modules).  Each package is used by one corpus only, so a
# held-out corpus shares no text with the training ones; splits in mara_traces.splits.
CORPORA: dict[str, tuple[str, tuple[str, ...]]] = {
    "code-asyncio": ("code", ("asyncio",)),
    "code-email": ("code", ("email",)),
    "code-unittest-importlib": ("code", ("unittest", "importlib")),
    "prose-pydoc-topics": ("topics", ()),
    "code-xml": ("code", ("xml",)),  # val
    "prose-docstrings-concurrency": (
        "docstrings",
        ("multiprocessing", "concurrent", "threading.py", "subprocess.py", "queue.py"),
    ),  # val
    "code-http-urllib": ("code", ("http", "urllib")),  # test
    "prose-docstrings-logging": ("docstrings", ("logging", "argparse.py", "typing.py")),  # test
}
CORPUS_WEIGHTS = {
    "code-asyncio": 0.15,
    "code-email": 0.15,
    "code-unittest-importlib": 0.15,
    "prose-pydoc-topics": 0.15,
    "code-xml": 0.10,
    "prose-docstrings-concurrency": 0.10,
    "code-http-urllib": 0.10,
    "prose-docstrings-logging": 0.10,
}
LM_SCHEDULES = ("warmup_cosine", "step", "const", "invsqrt")
LM_OPTIMIZERS = ("adamw", "adam", "momentum")
LR_RANGE = {"adamw": (3e-4, 1e-2), "adam": (3e-4, 1e-2), "momentum": (1e-2, 0.3)}


def _sources(names: tuple[str, ...]) -> list[Path]:
    """The .py files of stdlib packages / modules, sorted, tests excluded."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    files: list[Path] = []
    for name in names:
        path = lib / name
        if path.is_dir():
            files += sorted(f for f in path.rglob("*.py") if "test" not in f.parts)
        elif path.exists():
            files.append(path)
        else:
            raise FileNotFoundError(f"standard-library source {path} not found (needed by lm)")
    return files


def _docstrings(text: str) -> list[str]:
    """Module, class and function docstrings of one source file."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    nodes = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    return [d for n in nodes if (d := ast.get_docstring(n))]


@functools.cache
def corpus_bytes(name: str) -> np.ndarray:
    """A corpus as a uint8 array (deterministic for a given Python installation)."""
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}; expected one of {list(CORPORA)}")
    kind, packages = CORPORA[name]
    if kind == "topics":
        from pydoc_data.topics import topics

        text = "\n\n".join(topics[k] for k in sorted(topics))
    else:
        texts = [f.read_text(encoding="utf-8", errors="replace") for f in _sources(packages)]
        if kind == "docstrings":
            text = "\n\n".join(d for t in texts for d in _docstrings(t))
        else:
            text = "\n".join(texts)
    return np.frombuffer(text.encode("utf-8", errors="replace"), dtype=np.uint8).copy()


class CausalTransformer(nn.Module):
    """Byte embedding + learned positions, pre-norm causal self-attention blocks, tied head."""

    def __init__(self, width: int, depth: int, heads: int, context: int):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        nn.init.normal_(self.embed.weight, std=0.02)  # tied head: start near uniform logits
        self.pos = nn.Parameter(torch.zeros(context, width))
        layer = nn.TransformerEncoderLayer(
            width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        mask = torch.triu(torch.full((context, context), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        h = self.embed(x) + self.pos[:n]
        h = self.blocks(h, mask=self.mask[:n, :n], is_causal=True)
        return self.norm(h) @ self.embed.weight.T


class CharLSTM(nn.Module):
    """Byte embedding, an LSTM, a linear read-out."""

    def __init__(self, width: int, depth: int):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.lstm = nn.LSTM(width, width, depth, batch_first=True)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(self.embed(x))[0])


def sample_config(rng: np.random.Generator, budget: float = 1.0, stream: str = "v1") -> dict:
    """One run's corpus, model and hyper-parameters (``budget`` scales the logged points)."""
    corpus = weighted_choice(rng, CORPUS_WEIGHTS)
    depth = int(rng.choice([1, 2]))
    if rng.random() < 0.6:
        width = int(rng.choice([32, 48, 64]))
        model = f"transformer-{width}x{depth}h{int(rng.choice([2, 4]))}"
    else:
        model = f"lstm-{int(rng.choice([48, 64, 96]))}x{depth}"
    opt = str(rng.choice(LM_OPTIMIZERS, p=[0.5, 0.3, 0.2]))
    return {
        "corpus": corpus,
        "model": model,
        "ctx": int(rng.choice([24, 32, 48])),
        "opt": opt,
        "lr": log_uniform(rng, *LR_RANGE[opt]),
        "sched": str(rng.choice(LM_SCHEDULES)),
        "bs": int(rng.choice([8, 16, 24])),
        "points": max(12, int(rng.integers(100, 131) * budget)),
        "every": int(rng.integers(2, 6)),
        "seed": int(rng.integers(10_000)),
    }


def build_model(cfg: dict) -> nn.Module:
    """The configured network (``transformer-<width>x<depth>h<heads>`` or ``lstm-<w>x<d>``)."""
    kind, size = cfg["model"].split("-")
    if kind == "transformer":
        dims, heads = size.split("h")
        width, depth = (int(v) for v in dims.split("x"))
        return CausalTransformer(width, depth, int(heads), cfg["ctx"])
    if kind == "lstm":
        width, depth = (int(v) for v in size.split("x"))
        return CharLSTM(width, depth)
    raise ValueError(f"unknown lm model {cfg['model']!r}; expected transformer-... or lstm-...")


def run(cfg: dict) -> tuple[np.ndarray, np.ndarray]:
    """Train the configured model; (optimiser step, held-out cross-entropy) per logged point."""
    torch.manual_seed(cfg["seed"])
    gen = torch.Generator().manual_seed(cfg["seed"])
    data = torch.as_tensor(corpus_bytes(cfg["corpus"]), dtype=torch.long)
    cut = int(len(data) * (1.0 - HELD_OUT))
    train, held = data[:cut], data[cut:]
    ctx, bs = cfg["ctx"], cfg["bs"]
    # Fixed held-out windows (evenly spaced), the same at every logged point.
    starts = torch.linspace(0, len(held) - ctx - 2, EVAL_WINDOWS).long()
    ev = torch.stack([held[s : s + ctx + 1] for s in starts.tolist()])
    model = build_model(cfg)
    optim = make_optimizer(cfg["opt"], model.parameters(), cfg["lr"])
    loss_fn = nn.CrossEntropyLoss()
    total = cfg["points"] * cfg["every"]
    offsets = torch.arange(ctx + 1)
    steps, losses = [], []
    for t in range(total):
        for group in optim.param_groups:
            group["lr"] = cfg["lr"] * lr_factor(cfg["sched"], t / total)
        idx = torch.randint(0, len(train) - ctx - 1, (bs, 1), generator=gen) + offsets
        batch = train[idx]
        logits = model(batch[:, :-1])
        loss = loss_fn(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
        optim.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        if (t + 1) % cfg["every"] == 0:
            with torch.no_grad():
                held_loss = loss_fn(model(ev[:, :-1]).reshape(-1, VOCAB), ev[:, 1:].reshape(-1))
            value = float(held_loss)
            steps.append(t + 1)
            # A diverged run is a real outcome; cap it so the curve stays finite.
            losses.append(min(value, 1e3) if math.isfinite(value) else 1e3)
    return np.asarray(steps, np.float64), np.asarray(losses)
