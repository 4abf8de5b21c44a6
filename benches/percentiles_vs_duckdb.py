"""DuckDB side of benches/percentiles_vs_duckdb.rs.

Usage: python3 percentiles_vs_duckdb.py SAMPLES.parquet REPEAT
Loads the Parquet file into an in-memory DuckDB table, then for 1 and 2 threads times
the per-series, per-1-second-bucket p99 + avg query, exact (quantile_cont) and sketch
(approx_quantile), materialising the result into a temporary table. Prints one line per
run: threads kind best_seconds result_rows p99_sum.
"""

import sys
import time

import duckdb


def main() -> None:
    path, repeat = sys.argv[1], int(sys.argv[2])
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t AS SELECT * FROM read_parquet('{path}')")
    for threads in (1, 2):
        con.execute(f"SET threads = {threads}")
        for func in ("quantile_cont", "approx_quantile"):
            sql = (
                "CREATE OR REPLACE TEMP TABLE r AS "
                f"SELECT series, time_bucket(INTERVAL '1 second', time) AS b, {func}(value, 0.99) AS p99, "
                "avg(value) AS mean FROM t GROUP BY 1, 2"
            )
            best = float("inf")
            for i in range(repeat + 1):
                start = time.perf_counter()
                con.execute(sql)
                secs = time.perf_counter() - start
                if i > 0:
                    best = min(best, secs)
            rows, total = con.execute("SELECT count(*), sum(p99) FROM r").fetchone()
            print(threads, func, f"{best:.6f}", rows, repr(total))


if __name__ == "__main__":
    main()
