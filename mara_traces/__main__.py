"""Rebuild the trace library: ``python -m mara_traces --out PATH [--workers N]``.

Without ``--family`` it collects every part of the shipped recipe
(:data:`mara_traces.collect.LIBRARY_RECIPE`) into ``--out``, resuming what is there, and
writes the shipped form (runs that never learned left out) to ``--ship`` if given.
``--family F --stream S --n N`` collects the first N configs of one family's stream only.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from mara_env.traces import write_traces
from mara_traces.collect import FAMILIES, build_library, collect, learning_traces

parser = argparse.ArgumentParser(prog="python -m mara_traces", description=__doc__)
parser.add_argument("--out", type=Path, required=True, help="working library file (resumed)")
parser.add_argument("--ship", type=Path, help="also write the shipped form of the library here")
parser.add_argument("--n", type=int, default=220, help="with --family: traces of that stream")
parser.add_argument("--seed", type=int, default=0, help="config seed (0 for the shipped one)")
parser.add_argument("--workers", type=int, default=1, help="parallel processes (one per core)")
parser.add_argument("--family", choices=list(FAMILIES), help="collect only this family")
parser.add_argument("--stream", default="v1", help="with --family: config stream (v1, x1, v2)")
args = parser.parse_args()
if args.out.exists() and args.out.is_dir():
    parser.error(f"--out {args.out} is a directory; expected a .parquet file path")
start = time.perf_counter()
if args.family is None:
    table = build_library(args.out, seed=args.seed, workers=args.workers)
else:
    table = collect(
        args.family, args.n, args.out, seed=args.seed, workers=args.workers, stream=args.stream
    )
print(f"{table['trace_id'].nunique()} traces in {args.out} ({time.perf_counter() - start:.0f} s)")
if args.ship:
    shipped, dropped = learning_traces(table)
    write_traces(shipped, args.ship)
    print(f"{shipped['trace_id'].nunique()} traces in {args.ship}; {len(dropped)} runs that")
    print(f"never learned left out: {', '.join(dropped) or 'none'}")
