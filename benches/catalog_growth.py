#!/usr/bin/env python3
"""New series arriving at a live server on a store with many series: what each flush writes.

    python3 benches/catalog_growth.py STORE BINARY [BINARY ...] [--batches 60] [--flush-rows 2000]

For each binary (alternating, on a fresh copy of STORE each time): start `BINARY serve` on the
copy with `--flush-rows N`, then POST `--batches` OTLP/HTTP JSON requests one after another,
each carrying N samples (`--samples`, default N) of one series that is new to the store (host
`growth-<i>`), so that by default every request fills the buffer and the flush after it saves
the catalog with one new series.
Reported per binary: the requests' latency (p50, p99, max; an acknowledgement waits for the
WAL's fsync, and a write that finds the buffer full while a flush runs waits for that flush),
the wall time of all requests, and the bytes the server process wrote to storage
(`write_bytes` of `/proc/PID/io`, read before the first request and after the last flush),
then the count of stored samples of the new series (`lockstep sql`), which must equal the
number sent. STORE is only read (copied with `cp -r`).

With `--readers`, a `lockstep sql` process counting the new series' samples runs in a loop
beside the server while the requests go on (other processes opening the store while flushes
write increments, new snapshots and delete increments): reported are its runs, the runs that
failed with the documented retryable error, any other failure (there must be none) and
whether the counts it saw never went down.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import serve_otlp

T0 = 1_767_225_600_000_000_000  # 2026-01-01


def body(i, n):
    points = ",".join(
        f'{{"timeUnixNano":"{T0 + i * n * 1_000_000_000 + k * 1_000_000_000}","asDouble":{k}}}' for k in range(n)
    )
    return json.dumps({"resourceMetrics": [{
        "resource": {"attributes": [{"key": "host.name", "value": {"stringValue": f"growth-{i}"}}]},
        "scopeMetrics": [{"metrics": [{"name": "catalog_growth", "gauge": {"dataPoints": []}}]}],
    }]}).replace('"dataPoints": []', f'"dataPoints": [{points}]').encode()


def write_bytes(pid):
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    return 0


def run(binary, store, batches, flush_rows, tmp, readers=False, samples=None):
    samples = samples or flush_rows
    copy = os.path.join(tmp, "store")
    shutil.rmtree(copy, ignore_errors=True)
    subprocess.run(["cp", "-r", store, copy], check=True)
    for stale in ["LOCK"]:
        if os.path.exists(os.path.join(copy, stale)):
            os.remove(os.path.join(copy, stale))
    srv, url = serve_otlp.start(binary, copy, flush_rows)
    bodies = [body(i, samples) for i in range(batches)]
    stop = threading.Event()
    seen = {"runs": 0, "retryable": 0, "failed": [], "counts": []}

    def reader():
        while not stop.is_set():
            r = subprocess.run([binary, "sql", "--data-dir", copy, "--format", "csv",
                                "SELECT count(*) AS n FROM samples WHERE metric = 'catalog_growth'"],
                               capture_output=True, text=True)
            seen["runs"] += 1
            if r.returncode == 0:
                seen["counts"].append(int(r.stdout.split()[-1]))
            elif "retry" in r.stderr:
                seen["retryable"] += 1
            else:
                seen["failed"].append(r.stderr.strip())

    thread = threading.Thread(target=reader) if readers else None
    if thread:
        thread.start()
    before = write_bytes(srv.pid)
    lat = []
    start = time.perf_counter()
    for b in bodies:
        req = urllib.request.Request(url, data=b, headers={"Content-Type": "application/json"})
        t = time.perf_counter()
        with urllib.request.urlopen(req) as r:
            r.read()
        lat.append(time.perf_counter() - t)
    wall = time.perf_counter() - start
    if thread:
        stop.set()
        thread.join()
    # Let the last flush finish: stop the server (it flushes on shutdown).
    srv.send_signal(2)
    written = None
    while srv.poll() is None:
        try:
            written = write_bytes(srv.pid) - before
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.01)
    srv.wait()
    out = subprocess.run([binary, "sql", "--data-dir", copy, "--format", "csv",
                          "SELECT count(*) AS n FROM samples WHERE metric = 'catalog_growth'"],
                         capture_output=True, text=True, check=True).stdout.split()
    stored = int(out[-1])
    assert stored == batches * samples, f"{stored} stored, {batches * samples} sent"
    incs = os.listdir(os.path.join(copy, "series")) if os.path.isdir(os.path.join(copy, "series")) else []
    lat.sort()
    extra = {}
    if readers:
        counts = seen["counts"]
        extra = {"reader_runs": seen["runs"], "reader_retryable": seen["retryable"],
                 "reader_failed": len(seen["failed"]),
                 "reader_counts_monotonic": all(a <= b for a, b in zip(counts, counts[1:]))}
        for f in seen["failed"][:3]:
            print(f"reader failure: {f}", file=sys.stderr)
    return extra | {
        "p50_ms": 1e3 * statistics.median(lat),
        "p99_ms": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
        "max_ms": 1e3 * lat[-1],
        "wall_s": wall,
        "written_mb": (written or 0) / 1e6,
        "increments": len(incs),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store")
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--flush-rows", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--readers", action="store_true", help="a `lockstep sql` loop beside the server")
    ap.add_argument("--samples", type=int, default=None,
                    help="samples per request (default: --flush-rows, so that every request is flushed)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(a.store))) as tmp:
        for rep in range(a.reps):
            for binary in a.binaries:
                r = run(binary, a.store, a.batches, a.flush_rows, tmp, a.readers, a.samples)
                print(f"rep {rep} {binary}: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                                         for k, v in r.items()), flush=True)


if __name__ == "__main__":
    main()
