#!/usr/bin/env python3
"""Readers of a store whose WAL is full of new series (extreme series churn): two binaries, alternating.

    python3 benches/wal_replay.py build BINARY STORE [--requests 3600]
    python3 benches/wal_replay.py run STORE BIN_A BIN_B [--reps 2]

`build` makes STORE (which must not exist) the way the extreme-churn soak filled its WAL:
`BINARY serve` with no flush (`--flush-rows 100000000`) and no maintenance, fed OTLP/HTTP
protobuf requests one after another, each 2,000 `gpu.util` points of one host (`host.name`
node-0000 … node-0049 in turn, `service.name` trainer) with attributes `gpu` (0-7), `pod`
(`trainer-GEN-NNNN`) and `rank` (0-1999), a new generation GEN of pod names every 300 requests
(at 40k points/s, every 15 s). Each generation brings 100,000 new series of 6 samples each;
3,600 requests are 1.2 M series and 7.2 M samples in about 200 MB of WAL. The server is then
killed (SIGKILL), so nothing is flushed: every series is defined only in the WAL. Printed: the
time of the requests and the CPU time of the server process (user + system, from
`/proc/PID/stat`) up to the kill: the writer's cost of defining the series.

`run` times read-only `lockstep sql --data-dir STORE --format csv` processes, for each query
BIN_A then BIN_B, REPS times: `SELECT count(*) FROM samples` and a query matching one label
value. Reported per run (`/usr/bin/time -v`): wall, user and system CPU seconds, peak RSS; the
two binaries' outputs must agree. STORE is only read.
"""
import argparse
import http.client
import os
import signal
import subprocess
import sys
import time

QUERIES = [
    "SELECT count(*) FROM samples",
    "SELECT count(*), sum(value) FROM samples WHERE metric = 'gpu_util' AND pod = 'trainer-7-0042'",
]


def build(binary, store, requests):
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as svc
    from opentelemetry.proto.common.v1 import common_pb2 as common

    if os.path.exists(store):
        sys.exit(f"{store} exists")
    srv = subprocess.Popen(
        [binary, "serve", "--data-dir", store, "--listen", "127.0.0.1:0", "--insecure", "--http-listen",
         "127.0.0.1:0", "--flush-rows", "100000000", "--maintenance-interval-secs", "0",
         "--telemetry-interval-secs", "3600"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = None
    for _ in range(10):
        line = srv.stdout.readline().strip()
        if line.startswith("otlp/http on "):
            url = line.removeprefix("otlp/http on ")
            break
    if url is None:
        srv.kill()
        sys.exit("no otlp/http address")
    host, port = url.removeprefix("http://").split("/")[0].split(":")

    def kv(k, v):
        return common.KeyValue(key=k, value=common.AnyValue(string_value=v))

    def body(i):
        req = svc.ExportMetricsServiceRequest()
        rm = req.resource_metrics.add()
        rm.resource.attributes.extend([kv("host.name", f"node-{i % 50:04d}"), kv("service.name", "trainer")])
        g = rm.scope_metrics.add().metrics.add(name="gpu.util")
        t = int(time.time() * 1e9)
        gen = i // 300
        for p in range(2000):
            dp = g.gauge.data_points.add(time_unix_nano=t + p, as_double=float((p + i) % 100))
            dp.attributes.extend([kv("gpu", str(p % 8)), kv("pod", f"trainer-{gen}-{p // 8:04d}"),
                                  kv("rank", str(p))])
        return req.SerializeToString()

    conn = http.client.HTTPConnection(host, int(port))
    start = time.time()
    for i in range(requests):
        conn.request("POST", "/v1/metrics", body(i), {"Content-Type": "application/x-protobuf"})
        r = conn.getresponse()
        r.read()
        if r.status != 200:
            srv.kill()
            sys.exit(f"request {i}: status {r.status}")
    elapsed = time.time() - start
    with open(f"/proc/{srv.pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    srv.send_signal(signal.SIGKILL)
    srv.wait()
    wal = sum(e.stat().st_size for e in os.scandir(os.path.join(store, "wal")))
    print(f"{requests} requests, {requests * 2000} points in {elapsed:.1f} s, server CPU {cpu:.1f} s; "
          f"WAL {wal / 2**20:.0f} MiB")


def timed(binary, store, query):
    r = subprocess.run(["/usr/bin/time", "-v", binary, "sql", "--data-dir", store, "--format", "csv", query],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{binary}: {r.stderr[-500:]}")
    stats = {}
    for line in r.stderr.splitlines():
        key, _, value = line.strip().rpartition(": ")
        stats[key] = value
    wall = stats["Elapsed (wall clock) time (h:mm:ss or m:ss)"].split(":")
    return (r.stdout.strip(), float(wall[-2]) * 60 + float(wall[-1]), float(stats["User time (seconds)"]),
            float(stats["System time (seconds)"]), int(stats["Maximum resident set size (kbytes)"]) // 1024)


def run(store, binaries, reps):
    for query in QUERIES:
        print(query)
        outputs = {}
        for rep in range(reps):
            for name, binary in zip("AB", binaries):
                out, wall, user, sys_s, rss = timed(binary, store, query)
                outputs.setdefault(out, []).append(name)
                print(f"  {name} rep {rep + 1}: wall {wall:.2f} s, user {user:.2f} s, sys {sys_s:.2f} s, "
                      f"peak RSS {rss} MB", flush=True)
        if len(outputs) != 1:
            sys.exit(f"outputs differ: {outputs}")
        print("  result:", next(iter(outputs)).splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("binary")
    b.add_argument("store")
    b.add_argument("--requests", type=int, default=3600)
    r = sub.add_parser("run")
    r.add_argument("store")
    r.add_argument("a")
    r.add_argument("b")
    r.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    if args.cmd == "build":
        build(args.binary, args.store, args.requests)
    else:
        run(args.store, [args.a, args.b], args.reps)


main()
