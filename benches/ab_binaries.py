#!/usr/bin/env python3
"""A/B of two `lockstep` binaries on one store, whole process or per statement in one process.

Usage: benches/ab_binaries.py STORE BIN_A BIN_B [--reps N] [--query SQL ...] [--in-process K]

For each query and for 1 core (`taskset -c 0`) and 2 cores (`taskset -c 0,1`), runs
`BIN sql --data-dir STORE --format csv SQL` for A and B in turn, N times (default 11), and prints
the minimum and median wall time of each and the ratio B/A of the minimums. Alternating the two
binaries spreads the machine's noise over both. Default queries: `SELECT 1` (start-up),
`count(*), sum(value)` (a full scan) and a per-series per-10 s approx p99 over every series.

With `--in-process K`, each measurement is the time of one statement inside a running process:
a process running the statement `1 + K` times (separated by `;`, a session each, as the
servers do) less a process running it once, divided by K. After both core counts, each
binary's 1 -> 2 core scaling (median over median, and min over min) is printed.
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
ap.add_argument("--in-process", type=int, default=0, metavar="K")
args = ap.parse_args()


def timed(exe, cpus, sql):
    t = time.perf_counter()
    r = subprocess.run(["taskset", "-c", cpus, exe, "sql", "--data-dir", args.store, "--format", "csv", sql],
                       capture_output=True)
    if r.returncode != 0:
        sys.exit(f"{exe} failed on {sql[:200]!r}: {r.stderr.decode()[:300]}")
    return time.perf_counter() - t


def measure(exe, cpus, q):
    if args.in_process <= 0:
        return timed(exe, cpus, q)
    once = timed(exe, cpus, q)
    many = timed(exe, cpus, "; ".join([q] * (1 + args.in_process)))
    return (many - once) / args.in_process


for q in args.query or DEFAULT:
    per_cores = {}
    for cpus in ("0", "0,1"):
        res = {"A": [], "B": []}
        for _ in range(args.reps):
            for k, exe in (("A", args.a), ("B", args.b)):
                res[k].append(measure(exe, cpus, q))
        per_cores[cpus] = res
        line = "  ".join(f"{k}: min {min(v) * 1000:.1f} med {statistics.median(v) * 1000:.1f} ms" for k, v in res.items())
        print(f"{q[:60]:60s} cores={cpus:4s} {line}  B/A min {min(res['B']) / min(res['A']):.3f}", flush=True)
    if args.in_process > 0:
        one, two = per_cores["0"], per_cores["0,1"]
        line = "  ".join(
            f"{k}: {statistics.median(one[k]) / statistics.median(two[k]):.2f}x (min {min(one[k]) / min(two[k]):.2f}x)"
            for k in ("A", "B"))
        print(f"{q[:60]:60s} 1 -> 2 cores  {line}", flush=True)
