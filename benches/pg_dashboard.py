"""Dashboard queries over the PostgreSQL listener vs the same queries through `lockstep sql`.

Usage (after `cargo build --bin lockstep`, or `--release`; `pip install psycopg`):

    python3 benches/pg_dashboard.py                          # target/debug/lockstep
    python3 benches/pg_dashboard.py --lockstep target/release/lockstep --nodes 32 --minutes 30

Makes a simulated job (`lockstep simulate`, storage-latency scenario), imports it, starts
`lockstep serve --pg-listen 127.0.0.1:0` on the store, and times every panel query of
`docs/grafana/job-timeline.json` (with `$__timeFilter(time)` expanded over the whole job) by:

- `pgwire (psycopg, warm connection)`: one psycopg connection kept open, as Grafana keeps its
  pool; extended protocol, text results; the time of `execute` + `fetchall`;
- `lockstep sql (process)`: `lockstep sql --data-dir DB --format csv QUERY`, a process per
  query (opening the store's read-only snapshot, planning, running, printing);
- `lockstep sql --server (process)`: the same command against the server.

Each is run `--repeat` times after one warm-up; the median is reported with the rows per
query (the per-row encoding cost of the protocol grows with it). The processes' times include
process start and opening the store; the warm connection's does not, which is the point:
that is what a dashboard sees.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lockstep", default=str(ROOT / "target/debug/lockstep"))
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    import psycopg  # noqa: PLC0415 (optional dependency)

    dashboard = json.loads((ROOT / "docs/grafana/job-timeline.json").read_text())
    window = "time BETWEEN '2026-03-02T08:59:00Z' AND '2026-03-02T10:00:00Z'"
    queries = [
        (p["title"], t["rawSql"].replace("$__timeFilter(time)", window))
        for p in dashboard["panels"]
        for t in p["targets"]
    ]
    with tempfile.TemporaryDirectory() as tmp:
        bundle, db = Path(tmp) / "bundle", Path(tmp) / "db"
        run(args.lockstep, "simulate", "--out", str(bundle), "--nodes", str(args.nodes),
            "--minutes", str(args.minutes), "--scenario", "storage-latency")
        imported = run(args.lockstep, "import", "--data-dir", str(db), str(bundle)).splitlines()[0]
        server = subprocess.Popen(
            [args.lockstep, "serve", "--data-dir", str(db), "--listen", "127.0.0.1:0", "--pg-listen", "127.0.0.1:0",
             "--maintenance-interval-secs", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert server.stdout is not None
            server.stdout.readline()
            pg = server.stdout.readline().split()[2]
            url = f"postgresql://bench@{pg}/lockstep"
            conn = psycopg.connect(url, autocommit=True)

            def pgwire(sql: str) -> int:
                return len(conn.execute(sql).fetchall())

            def local(sql: str) -> int:
                return len(run(args.lockstep, "sql", "--data-dir", str(db), "--format", "csv", sql).splitlines()) - 1

            def remote(sql: str) -> int:
                return len(run(args.lockstep, "sql", "--server", url, "--format", "csv", sql).splitlines()) - 1

            print(f"# {imported}; {args.repeat} runs each, median")
            print("| panel | rows | pgwire (psycopg, warm connection) ms | lockstep sql (process) ms "
                  "| lockstep sql --server (process) ms |")
            print("|---|--:|--:|--:|--:|")
            totals = [0.0, 0.0, 0.0]
            for title, sql in queries:
                medians, rows = [], None
                for how in (pgwire, local, remote):
                    how(sql)
                    times = []
                    for _ in range(args.repeat):
                        started = time.perf_counter()
                        n = how(sql)
                        times.append((time.perf_counter() - started) * 1000)
                        assert rows is None or rows == n, (title, rows, n)
                        rows = n
                    medians.append(statistics.median(times))
                totals = [a + b for a, b in zip(totals, medians)]
                print(f"| {title} | {rows} | " + " | ".join(f"{m:.1f}" for m in medians) + " |")
            print("| **all six panels** |  | " + " | ".join(f"**{t:.1f}**" for t in totals) + " |")
            conn.close()
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
