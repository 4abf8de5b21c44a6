"""Queries through the store vs DuckDB over the same Parquet (issue 19).

Imports a bundle (a fresh `lockstep simulate` bundle by default, or `--bundle DIR` holding a
`samples.parquet` with `time` (int ns), `metric`, `value` and label columns), then times the same
questions:
- Lockstep: `lockstep sql --format csv` as a whole process (release binary; one or more binaries,
  e.g. before and after a change), pinned to 1 or 2 cores with `taskset` (DataFusion and tokio
  size themselves from the CPUs the process may use);
- DuckDB over the bundle's Parquet: a fresh `python3 -c 'import duckdb; ...'` process
  (whole process, `SET threads`), and in-process (one connection, `SET threads`, timing
  `execute().fetchall()` only);
- Lockstep in-process, for the last binary: one process running the statement 1 + 3 times
  against one running it once, the difference divided by 3 (process start and store open
  cancel out; each statement still builds its own session, per-series dictionaries included,
  and reads the footers again; no data is cached between statements).
Lockstep's questions use `local_time` (the raw timestamp, which is what the Parquet holds), so
both sides answer the same question; the script checks that the answers agree (counts exactly,
sums to 1e-9 relative) and prints a Markdown table, best of `--repeat` runs.

Usage:
  python3 benches/query_vs_duckdb.py --lockstep target/release/lockstep [--lockstep OLD=path ...]
      [--nodes 32 --minutes 30 | --bundle DIR] [--repeat 3] [--work DIR]
"""

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import duckdb

NS = 1_000_000_000


def series_columns(con, parquet):
    cols = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{parquet}')").fetchall()]
    return [c for c in cols if c not in ("time", "value")]


def questions(con, parquet):
    """(name, lockstep sql, duckdb sql over view `s`, kind) for the bundle."""
    lo, hi = con.execute(f"SELECT min(time), max(time) FROM read_parquet('{parquet}')").fetchone()
    metrics = {r[0]: r[1] for r in con.execute(f"SELECT metric, count(*) FROM read_parquet('{parquet}') GROUP BY 1").fetchall()}
    keys = ", ".join(f'"{c}"' for c in series_columns(con, parquet))
    w_lo = lo + (hi - lo) // 3
    w_hi = w_lo + 10 * 60 * NS
    gauge = "DCGM_FI_DEV_POWER_USAGE" if "DCGM_FI_DEV_POWER_USAGE" in metrics else max(metrics, key=metrics.get)
    narrow = next((m for m in ("nccl_collective_exec_time_microseconds",) if m in metrics), gauge)
    wide_prefix = "DCGM" if any(m.startswith("DCGM") for m in metrics) else ""
    counter = next(
        (m for m in ("infiniband_switch_port_transmit_data_bytes_total",) if m in metrics),
        next((m for m in metrics if m.endswith("_total")), gauge),
    )
    port_keys = [c for c in ("switch", "port", "host", "device") if c in series_columns(con, parquet)]
    pk = ", ".join(port_keys) or "metric"
    q = [("process start-up: SELECT 1", "SELECT 1", "SELECT 1", "exact")]
    q.append(("count(*)", "SELECT count(*) FROM samples", "SELECT count(*) FROM s", "exact"))
    q.append(("count(*), sum(value)", "SELECT count(*), sum(value) FROM samples", "SELECT count(*), sum(value) FROM s", "exact"))
    q.append((
        f"per-host avg of {gauge}, 10 min window",
        f"SELECT count(*), sum(a) FROM (SELECT host, avg(value) AS a FROM samples WHERE metric = '{gauge}' "
        f"AND local_time >= to_timestamp_nanos({w_lo}) AND local_time < to_timestamp_nanos({w_hi}) GROUP BY host)",
        f"SELECT count(*), sum(a) FROM (SELECT host, avg(value) AS a FROM s WHERE metric = '{gauge}' "
        f"AND time >= {w_lo} AND time < {w_hi} GROUP BY host)",
        "exact",
    ))
    for label, where in ((f"narrow: {narrow}", f"metric = '{narrow}'"), (f"wide: {wide_prefix}%", f"metric LIKE '{wide_prefix}%'")):
        q.append((
            f"per-series per-10 s p99, {label}",
            "SELECT count(*), sum(p) FROM (SELECT series_id, date_bin(INTERVAL '10 seconds', local_time) AS b, "
            f"quantile_cont(value, 0.99) AS p FROM samples WHERE {where} GROUP BY 1, 2)",
            f"SELECT count(*), sum(p) FROM (SELECT {keys}, time // {10 * NS} AS b, quantile_cont(value, 0.99) AS p "
            f"FROM s WHERE {where} GROUP BY ALL)",
            "exact",
        ))
    q.append((
        f"counter rate per port: {counter}",
        f"SELECT count(*), sum(r) FROM (SELECT {pk}, (max(value) - min(value)) / "
        f"(CAST(max(CAST(local_time AS BIGINT)) - min(CAST(local_time AS BIGINT)) AS DOUBLE) / 1e9) AS r "
        f"FROM samples WHERE metric = '{counter}' GROUP BY {pk})",
        f"SELECT count(*), sum(r) FROM (SELECT {pk}, (max(value) - min(value)) / "
        f"(CAST(max(time) - min(time) AS DOUBLE) / 1e9) AS r FROM s WHERE metric = '{counter}' GROUP BY {pk})",
        "exact",
    ))
    # Thresholds: rows above a high quantile (value ranges per series run prune the rest).
    thr = con.execute(f"SELECT quantile_disc(value, 0.999) FROM read_parquet('{parquet}') WHERE metric = '{gauge}'").fetchone()[0]
    thr_all = con.execute(f"SELECT quantile_disc(value, 0.999) FROM read_parquet('{parquet}')").fetchone()[0]
    for label, where in (
        (f"{gauge} at or above its p99.9 ({thr!r})", f"metric = '{gauge}' AND value >= {thr!r}"),
        (f"any metric at or above the p99.9 of all values ({thr_all!r})", f"value >= {thr_all!r}"),
    ):
        q.append((
            f"threshold: {label}",
            f"SELECT count(*), sum(value) FROM samples WHERE {where}",
            f"SELECT count(*), sum(value) FROM s WHERE {where}",
            "exact",
        ))
    hosts = [r[0] for r in con.execute(f"SELECT DISTINCT host FROM read_parquet('{parquet}') WHERE metric = '{gauge}' ORDER BY 1 LIMIT 2").fetchall()]
    if len(hosts) == 2 and "gpu" in series_columns(con, parquet):
        a, b = hosts
        sel = lambda t, h: (  # noqa: E731
            f"SELECT {t} AS t, avg(value) AS v FROM {{src}} WHERE metric = '{gauge}' AND host = '{h}' AND gpu = '0' GROUP BY 1"
        )
        lb = "date_bin(INTERVAL '1 second', local_time)"
        db = f"time // {NS}"
        q.append((
            f"lag_corr: {gauge} {a} vs {b}, 1 s grid, max lag 30 s",
            f"WITH x AS ({sel(lb, a).format(src='samples')}), y AS ({sel(lb, b).format(src='samples')}) "
            "SELECT CAST(r['lag_ns'] AS BIGINT) / 1000000000 FROM (SELECT lag_corr(x.t, x.v, y.v, INTERVAL '30 seconds') AS r "
            "FROM x JOIN y ON x.t = y.t)",
            # Same grid; the lag maximising |corr| over -30..30 s (Pearson on the overlap).
            f"WITH x AS ({sel(db, a).format(src='s')}), y AS ({sel(db, b).format(src='s')}), "
            "l AS (SELECT range AS k FROM range(-30, 31)), "
            "c AS (SELECT k, corr(x.v, y.v) AS c FROM l, x JOIN y ON y.t = x.t + l.k GROUP BY k) "
            "SELECT k FROM c ORDER BY abs(c) DESC, abs(k), k DESC LIMIT 1",
            "lag",
        ))
    return q


def parse_csv(text):
    rows = list(csv.reader(io.StringIO(text)))
    return [tuple(rows[1])] if len(rows) > 1 else []


def same(a, b, kind):
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        try:
            fx, fy = float(x), float(y)
        except (TypeError, ValueError):
            return False
        if kind == "lag":
            return abs(fx - fy) <= 1
        if abs(fx - fy) > 1e-9 * max(1.0, abs(fx), abs(fy)):
            return False
    return True


def cpus(threads):
    return ["taskset", "-c", ",".join(str(i) for i in range(threads))]


def time_lockstep(binary, store, sql, threads, repeat):
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        p = subprocess.run(cpus(threads) + [binary, "sql", "--data-dir", store, "--format", "csv", sql],
                           capture_output=True, text=True)
        secs = time.perf_counter() - t
        if p.returncode != 0:
            return None, p.stderr.strip().splitlines()[-1:]
        best, out = min(best, secs), parse_csv(p.stdout)
    return best, out


def time_lockstep_inproc(binary, store, sql, threads, repeat, once, k=3):
    """Lockstep per statement within one process: (T(1 + k statements) - T(1)) / k, each T
    best of `repeat`; process start, store open and exit cancel out. Each statement builds its
    session and reads footers and data again (from the page cache, as DuckDB does)."""
    many, _ = time_lockstep(binary, store, "; ".join([sql] * (1 + k)), threads, repeat)
    return None if many is None or once is None else max(0.0, (many - once) / k)


def time_duckdb_process(parquet, sql, threads, repeat):
    code = (
        "import duckdb, json, sys; c = duckdb.connect(); c.execute('SET enable_progress_bar = false'); "
        "c.execute(sys.argv[1]); "
        f"c.execute(\"CREATE VIEW s AS SELECT * FROM read_parquet('{parquet}')\"); "
        "print(json.dumps([str(v) for v in c.execute(sys.argv[2]).fetchone()]))"
    )
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        p = subprocess.run(cpus(threads) + [sys.executable, "-c", code, f"SET threads = {threads}", sql],
                           capture_output=True, text=True, check=True)
        best, out = min(best, time.perf_counter() - t), [tuple(json.loads(p.stdout.strip().splitlines()[-1]))]
    return best, out


def time_duckdb_inproc(con, sql, threads, repeat):
    con.execute(f"SET threads = {threads}")
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        row = con.execute(sql).fetchone()
        best, out = min(best, time.perf_counter() - t), [tuple(str(v) for v in row)]
    return best, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lockstep", action="append", required=True, help="[NAME=]path of a lockstep binary; repeatable")
    ap.add_argument("--bundle", help="bundle directory with samples.parquet (default: simulate one)")
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--minutes", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--from", dest="start", type=int, default=0, help="skip the first N questions")
    ap.add_argument("--work", help="working directory (default: a temporary one, removed)")
    args = ap.parse_args()
    binaries = [(b.split("=", 1) if "=" in b else (os.path.basename(b), b)) for b in args.lockstep]
    work = args.work or tempfile.mkdtemp(prefix="lockstep-qvd-")
    try:
        bundle = args.bundle
        if not bundle:
            bundle = os.path.join(work, "bundle")
            if not os.path.exists(os.path.join(bundle, "samples.parquet")):
                subprocess.run([binaries[-1][1], "simulate", "--out", bundle, "--nodes", str(args.nodes),
                                "--minutes", str(args.minutes)], check=True)
        parquet = os.path.join(bundle, "samples.parquet")
        store = os.path.join(work, "store")
        if not os.path.exists(os.path.join(store, "manifest.json")):
            t = time.perf_counter()
            subprocess.run([binaries[-1][1], "import", "--data-dir", store, bundle], check=True, capture_output=True)
            print(f"import: {time.perf_counter() - t:.2f} s", file=sys.stderr)
        con = duckdb.connect()
        con.execute(f"CREATE VIEW s AS SELECT * FROM read_parquet('{parquet}')")
        n = con.execute("SELECT count(*) FROM s").fetchone()[0]
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(store) for f in fs)
        print(f"bundle {bundle}: {n:,} samples, parquet {os.path.getsize(parquet) / 1e6:.1f} MB, store {size / 1e6:.1f} MB")
        inproc = duckdb.connect()
        inproc.execute("SET enable_progress_bar = false")
        inproc.execute(f"CREATE VIEW s AS SELECT * FROM read_parquet('{parquet}')")
        names = [name for name, _ in binaries]
        print()
        print("| query | threads | " + " | ".join(f"lockstep {n_} (process)" for n_ in names)
              + " | DuckDB (process) | lockstep (in-process) | DuckDB (in-process) | lockstep/DuckDB process"
              + " | lockstep/DuckDB in-process | same answer |")
        print("|---|--:|" + "--:|" * (len(names) + 5) + "---|")
        for name, lsql, dsql, kind in questions(con, parquet)[args.start:]:
            for threads in (int(t) for t in args.threads.split(",")):
                d_proc, d_out = time_duckdb_process(parquet, dsql, threads, args.repeat)
                d_in, _ = time_duckdb_inproc(inproc, dsql, threads, args.repeat)
                cells, agree, last = [], [], None
                for _, binary in binaries:
                    secs, out = time_lockstep(binary, store, lsql, threads, args.repeat)
                    if secs is None:
                        cells.append(f"failed: {out}")
                        continue
                    cells.append(f"{secs:.3f} s")
                    agree.append(same(out[0], d_out[0], kind) if out else False)
                    last = secs
                ratio = f"{last / d_proc:.2f}" if last else "-"
                l_in = time_lockstep_inproc(binaries[-1][1], store, lsql, threads, args.repeat, last)
                l_in_cell = f"{l_in:.3f} s" if l_in is not None else "-"
                ratio_in = f"{l_in / d_in:.2f}" if l_in is not None and d_in > 0 else "-"
                print(f"| {name} | {threads} | " + " | ".join(cells)
                      + f" | {d_proc:.3f} s | {l_in_cell} | {d_in:.3f} s | {ratio} | {ratio_in}"
                      + f" | {'yes' if agree and all(agree) else 'NO: ' + str(d_out)} |",
                      flush=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
