#!/usr/bin/env python3
"""Distributed SQL on one machine: one process vs 1 and 2 `lockstep worker`s (issue 20).

Builds one day of a 64-node job: `lockstep simulate` for `--minutes` of the job (1 s samples),
thinned to a `--step-s` scrape interval and repeated, shifted by the simulated span, until it
covers `--hours` (DuckDB does the rewrite). Imports it into a store under a `file://` data URL
(the object-store path, so every read is a read syscall of the process that makes it), then
times the same statements:

- `one process, 1 core`: `lockstep sql` alone, pinned to core 0 (`taskset`);
- `one process, 2 cores`: `lockstep sql` alone;
- `2 workers`: `lockstep sql --workers A,B`, worker A pinned to core 0, B to core 1.

With a single worker, datafusion-distributed keeps a plan whose stages would each have one task
on the coordinator (there is nothing to spread), so "1 worker" is the one-process, one-core run.

Workers and coordinator run with `--cache-size-mb 0`, so each query reads its row groups from
the store; the bytes each worker read per statement are the growth of its `rchar` in
`/proc/PID/io`. Answers are compared across the three runs (rounded as printed).

    cargo build --release --bin lockstep
    python3 benches/distributed.py --lockstep target/release/lockstep --work /tmp/dist-bench
"""

import argparse
import os
import shutil
import subprocess
import sys
import time

QUERIES = [
    ("count(*), sum(value)", "SELECT count(*) AS n, sum(value) AS s FROM samples"),
    (
        "per-host avg power, 1 h window",
        "SELECT host, round(avg(value), 6) AS a FROM samples WHERE metric = 'DCGM_FI_DEV_POWER_USAGE' "
        "AND time >= '2026-03-02T15:00:00' AND time < '2026-03-02T16:00:00' GROUP BY host ORDER BY host",
    ),
    (
        "per-series hourly p99, DCGM power",
        "SELECT series_id, date_bin(INTERVAL '1 hour', time) AS h, quantile_cont(value, 0.99) AS p99 "
        "FROM samples WHERE metric = 'DCGM_FI_DEV_POWER_USAGE' GROUP BY series_id, h ORDER BY series_id, h",
    ),
    (
        "ddsketch median per metric",
        "SELECT metric, round(ddsketch_quantile(ddsketch(value), 0.5), 6) AS m FROM samples GROUP BY metric ORDER BY metric",
    ),
    (
        "change points per GPU temperature series",
        "SELECT series_id, cardinality(change_points(time, value)) AS k FROM samples "
        "WHERE metric = 'DCGM_FI_DEV_GPU_TEMP' GROUP BY series_id ORDER BY series_id",
    ),
]


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def build_day(lockstep, work, nodes, minutes, hours, step_s):
    import duckdb

    day = os.path.join(work, "day")
    if os.path.exists(os.path.join(day, "samples.parquet")):
        return day
    sim = os.path.join(work, "sim")
    t0 = time.time()
    sh([lockstep, "simulate", "--out", sim, "--nodes", str(nodes), "--minutes", str(minutes), "--seed", "1"],
       stdout=subprocess.DEVNULL)
    os.makedirs(day, exist_ok=True)
    span_ns = minutes * 60 * 10**9
    copies = max(1, (hours * 60) // minutes)
    con = duckdb.connect()
    con.execute(f"SET threads = {os.cpu_count()}")
    con.execute(
        f"COPY (SELECT s.* REPLACE (s.time + k * {span_ns}::BIGINT AS time) "
        f"FROM read_parquet('{sim}/samples.parquet') s, range({copies}) r(k) "
        f"WHERE (s.time // 1000000000) % {step_s} = 0) TO '{day}/samples.parquet' (FORMAT parquet)"
    )
    con.execute(
        f"COPY (SELECT c.* REPLACE (c.t1 + k * {span_ns}::BIGINT AS t1, c.t2 + k * {span_ns}::BIGINT AS t2, "
        f"c.t3 + k * {span_ns}::BIGINT AS t3, c.t4 + k * {span_ns}::BIGINT AS t4) "
        f"FROM read_parquet('{sim}/clock_sync.parquet') c, range({copies}) r(k)) "
        f"TO '{day}/clock_sync.parquet' (FORMAT parquet)"
    )
    for doc in ("topology.json", "jobs.json"):
        shutil.copy(os.path.join(sim, doc), os.path.join(day, doc))
    rows = con.execute(f"SELECT count(*) FROM read_parquet('{day}/samples.parquet')").fetchone()[0]
    print(f"bundle: {nodes} nodes, {copies} x {minutes} min at {step_s} s = {rows:,} samples "
          f"({time.time() - t0:.0f} s to build)", file=sys.stderr)
    return day


def same_answer(a, b, rel=1e-9):
    """The same CSV, numbers equal to `rel` (float sums depend on the order of addition)."""
    la, lb = a.strip().splitlines(), b.strip().splitlines()
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        for u, v in zip(x.split(","), y.split(",")):
            if u == v:
                continue
            try:
                fu, fv = float(u), float(v)
            except ValueError:
                return False
            if abs(fu - fv) > rel * max(abs(fu), abs(fv)):
                return False
    return True


def rchar(pid):
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return 0


class Worker:
    def __init__(self, lockstep, url, data_dir, core):
        self.proc = subprocess.Popen(
            ["taskset", "-c", str(core), lockstep, "worker", "--listen", "127.0.0.1:0", "--data-url", url,
             "--data-dir", data_dir, "--cache-size-mb", "0"],
            stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"worker said {line!r}")
        self.addr = line.split()[-1]

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def run_sql(lockstep, url, data_dir, sql, workers=None, core=None):
    cmd = (["taskset", "-c", str(core)] if core is not None else []) + [lockstep, "sql", "--data-url", url, "--data-dir", data_dir, "--cache-size-mb", "0", "--format", "csv"]
    if workers:
        cmd += ["--workers", ",".join(w.addr for w in workers)]
    cmd.append(sql)
    t = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - t, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lockstep", default="target/release/lockstep")
    ap.add_argument("--work", default="/tmp/lockstep-dist-bench")
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--minutes", type=int, default=60)
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--step-s", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    lockstep = os.path.abspath(args.lockstep)
    os.makedirs(args.work, exist_ok=True)
    day = build_day(lockstep, args.work, args.nodes, args.minutes, args.hours, args.step_s)
    store = os.path.join(args.work, "store")
    url = "file://" + store
    if not os.path.exists(os.path.join(store, "manifest.json")):
        os.makedirs(store, exist_ok=True)
        t = time.time()
        sh([lockstep, "import", "--data-url", url, "--data-dir", os.path.join(args.work, "writer"), day],
           stdout=subprocess.DEVNULL)
        print(f"import: {time.time() - t:.1f} s", file=sys.stderr)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(store) for f in fs)
    print(f"store: {size / 1e6:.1f} MB", file=sys.stderr)

    rows = []
    for label, sql in QUERIES:
        answers, times, scan = {}, {}, {}
        for label_, core in (("one1", 0), ("one2", None)):
            best = min(run_sql(lockstep, url, os.path.join(args.work, "c0"), sql, core=core)[0]
                       for _ in range(args.repeat))
            times[label_] = best
            answers[label_] = run_sql(lockstep, url, os.path.join(args.work, "c0"), sql, core=core)[1]
        workers = [Worker(lockstep, url, os.path.join(args.work, f"w{i}"), i) for i in range(2)]
        try:
            best, per = None, None
            for _ in range(args.repeat):
                before = [rchar(w.proc.pid) for w in workers]
                dt, out = run_sql(lockstep, url, os.path.join(args.work, "c1"), sql, workers)
                after = [rchar(w.proc.pid) for w in workers]
                if best is None or dt < best:
                    best, per = dt, [a - b for a, b in zip(after, before)]
                answers[2] = out
            times[2] = best
            scan[2] = per
        finally:
            for w in workers:
                w.stop()
        same = same_answer(answers["one1"], answers["one2"]) and same_answer(answers["one1"], answers[2])
        rows.append((label, times, scan, same))
        print(f"{label}: 1 core {times['one1']:.2f} s, 2 cores {times['one2']:.2f} s, 2 workers {times[2]:.2f} s, "
              f"same={same}", file=sys.stderr)

    print("| query | one process, 1 core | one process, 2 cores | 2 workers (1 core each) | 1 core → 2 workers | MB read per worker | same answer |")
    print("|---|--:|--:|--:|--:|--:|---|")
    for label, t, scan, same in rows:
        per2 = " + ".join(f"{b / 1e6:.0f}" for b in scan[2])
        print(f"| {label} | {t['one1']:.2f} s | {t['one2']:.2f} s | {t[2]:.2f} s | {t['one1'] / t[2]:.2f}x | "
              f"{per2} | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
