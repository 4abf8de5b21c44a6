#!/usr/bin/env python3
"""Whole-process time of `lockstep check` against DuckDB decoding every column of the same
Parquet files, at 1 core (`taskset -c 0`) and 2 (`taskset -c 0,1`), alternating the two.

  benches/check_vs_duckdb.py STORE LOCKSTEP_BINARY [REPS]

Prints the minimum and median of each and the ratio of the minimums (lockstep / DuckDB).
"""
import statistics
import subprocess
import sys
import time


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    store, binary = sys.argv[1], sys.argv[2]
    reps = int(sys.argv[3]) if len(sys.argv) == 4 else 5
    sql = ("SELECT count(*), min(series_id), max(series_id), min(time), max(time), sum(value_int), "
           f"sum(value_scale), sum(value_float) FROM read_parquet('{store}/data/*/*.parquet')")
    commands = {
        "lockstep check": [binary, "check", "--data-dir", store],
        "duckdb": [sys.executable, "-c", f"import duckdb; print(duckdb.sql({sql!r}).fetchall())"],
    }
    for cpus in ("0", "0,1"):
        times = {name: [] for name in commands}
        for _ in range(reps):
            for name, cmd in commands.items():
                started = time.perf_counter()
                run = subprocess.run(["taskset", "-c", cpus, *cmd], capture_output=True)
                if run.returncode != 0:
                    sys.exit(f"{name} failed: {run.stderr.decode()[:300]}")
                times[name].append(time.perf_counter() - started)
        ours, duck = times["lockstep check"], times["duckdb"]
        print(f"cores={cpus}: lockstep check min {min(ours) * 1000:.0f} ms (median {statistics.median(ours) * 1000:.0f}), "
              f"duckdb min {min(duck) * 1000:.0f} ms (median {statistics.median(duck) * 1000:.0f}), "
              f"ratio {min(ours) / min(duck):.2f}", flush=True)


if __name__ == "__main__":
    main()
