"""Rebuild the shipped trace library: ``python -m mara_traces --out PATH --n N``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from mara_env.traces import SHIPPED_LIBRARY
from mara_traces.collect import build_library

parser = argparse.ArgumentParser(prog="python -m mara_traces", description=__doc__)
parser.add_argument("--out", type=Path, default=SHIPPED_LIBRARY, help="library file (resumed)")
parser.add_argument("--n", type=int, default=220, help="traces per family")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--workers", type=int, default=1)
args = parser.parse_args()
start = time.perf_counter()
table = build_library(args.out, args.n, seed=args.seed, workers=args.workers)
print(f"{table['trace_id'].nunique()} traces in {args.out} ({time.perf_counter() - start:.0f} s)")
