"""Rebuild the shipped trace library: ``python -m mara_traces --out PATH --n N``.

``--family rl --stream x1 --n N`` instead collects the first N configs of one family's
extension stream and appends them to the library (existing rows stay as they are).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from mara_env.traces import SHIPPED_LIBRARY
from mara_traces.collect import FAMILIES, build_library, collect

parser = argparse.ArgumentParser(prog="python -m mara_traces", description=__doc__)
parser.add_argument("--out", type=Path, default=SHIPPED_LIBRARY, help="library file (resumed)")
parser.add_argument("--n", type=int, default=220, help="traces per family (per stream)")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--workers", type=int, default=1)
parser.add_argument(
    "--family", choices=list(FAMILIES), help="collect only this family (default: all)"
)
parser.add_argument(
    "--stream", default="v1", help="config stream: v1 (shipped draws) or an extension, e.g. x1"
)
args = parser.parse_args()
if args.stream != "v1" and args.family is None:
    parser.error("--stream other than v1 needs --family")
start = time.perf_counter()
if args.family is None:
    table = build_library(args.out, args.n, seed=args.seed, workers=args.workers)
else:
    table = collect(
        args.family, args.n, args.out, seed=args.seed, workers=args.workers, stream=args.stream
    )
print(f"{table['trace_id'].nunique()} traces in {args.out} ({time.perf_counter() - start:.0f} s)")
