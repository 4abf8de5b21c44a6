#!/usr/bin/env python3
"""A/B of two `lockstep` binaries on one store, whole process.

Usage: benches/ab_binaries.py STORE BIN_A BIN_B [--reps N] [--query SQL ...]

For each query and for 1 core (`taskset -c 0`) and 2 cores (`taskset -c 0,1`), runs
`BIN sql --data-dir STORE --format csv SQL` for A and B in turn, N times (default 11), and prints
the minimum and median wall time of each and the ratio B/A of the minimums. Alternating the two
binaries spreads the machine's noise over both. Default queries: `SELECT 1` (start-up),
`count(*), sum(value)` (a full scan) and a per-series per-10 s approx p99 over every series.
"""
import argparse
import statistics
import subprocess
import sys
import time

DEFAULT = [
    "SELECT 1",
    "SELECT count(*), sum(value) FROM samples",
    "SELECT series_id, date_bin(INTERVAL '10 seconds', time) AS t, approx_percentile_cont(value, 0.99) "
    "FROM samples GROUP BY 1, 2 ORDER BY 1, 2 LIMIT 1",
]

ap = argparse.ArgumentParser()
ap.add_argument("store")
ap.add_argument("a")
ap.add_argument("b")
ap.add_argument("--reps", type=int, default=11)
ap.add_argument("--query", action="append")
args = ap.parse_args()
for q in args.query or DEFAULT:
    for cpus in ("0", "0,1"):
        res = {"A": [], "B": []}
        for _ in range(args.reps):
            for k, exe in (("A", args.a), ("B", args.b)):
                t = time.perf_counter()
                r = subprocess.run(["taskset", "-c", cpus, exe, "sql", "--data-dir", args.store, "--format", "csv", q],
                                   capture_output=True)
                res[k].append(time.perf_counter() - t)
                if r.returncode != 0:
                    sys.exit(f"{exe} failed on {q!r}: {r.stderr.decode()[:300]}")
        line = "  ".join(f"{k}: min {min(v) * 1000:.1f} med {statistics.median(v) * 1000:.1f} ms" for k, v in res.items())
        print(f"{q[:60]:60s} cores={cpus:4s} {line}  B/A min {min(res['B']) / min(res['A']):.3f}", flush=True)
