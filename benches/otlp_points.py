#!/usr/bin/env python3
"""OTLP/HTTP protobuf ingest of data points with attributes: two `lockstep` binaries, alternating.

Usage: benches/otlp_points.py BIN_A BIN_B [--requests N] [--points P] [--reps R]

Each request is an `ExportMetricsServiceRequest` built with the OpenTelemetry protobuf classes
(`pip install opentelemetry-proto`): one resource (`host.name`, `service.name`), one gauge and one
cumulative histogram of 4 buckets, P data points each with five attributes (`gpu`, `job`,
`pod`, `rank`, `tenant`). The first request defines the series; every later one repeats them
with later timestamps, as a collector's export every interval does. Requests are encoded before
the clock starts and posted one after another on one connection to `lockstep serve
--http-listen` (fresh store each run, `--flush-rows` large enough that no flush is timed); the
time is from the first post to the last response. Prints points/s per run and the ratio B/A of
the medians. Checks that every post returned 200 and that the stored sample count is right.
"""
import argparse
import http.client
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as svc
from opentelemetry.proto.common.v1 import common_pb2 as common
from opentelemetry.proto.metrics.v1 import metrics_pb2 as m

import serve_otlp

ap = argparse.ArgumentParser()
ap.add_argument("a")
ap.add_argument("b")
ap.add_argument("--requests", type=int, default=200)
ap.add_argument("--points", type=int, default=500)
ap.add_argument("--reps", type=int, default=3)
args = ap.parse_args()

T0 = 1_760_000_000_000_000_000


def kv(k, v):
    return common.KeyValue(key=k, value=common.AnyValue(string_value=v))


def body(i):
    req = svc.ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    rm.resource.attributes.extend([kv("host.name", "node-0042"), kv("service.name", "trainer")])
    sm = rm.scope_metrics.add()
    t = T0 + i * 10_000_000_000
    gauge = sm.metrics.add(name="gpu.util")
    hist = sm.metrics.add(name="step.seconds")
    hist.histogram.aggregation_temporality = m.AGGREGATION_TEMPORALITY_CUMULATIVE
    for p in range(args.points):
        attrs = [kv("gpu", str(p % 8)), kv("job", f"job-{p // 64}"), kv("pod", f"trainer-{p // 8:04d}"),
                 kv("rank", str(p)), kv("tenant", "research")]
        dp = gauge.gauge.data_points.add(time_unix_nano=t, as_double=float((p + i) % 100))
        dp.attributes.extend(attrs)
        h = hist.histogram.data_points.add(time_unix_nano=t, count=10 * (i + 1), sum=5.0 * (i + 1))
        h.explicit_bounds.extend([0.1, 0.5, 1.0])
        h.bucket_counts.extend([i + 1, 4 * (i + 1), 4 * (i + 1), i + 1])
        h.attributes.extend(attrs)
    return req.SerializeToString()


def run(binary, bodies):
    tmp = tempfile.mkdtemp(prefix="otlp-points-")
    store = os.path.join(tmp, "store")
    srv, url = serve_otlp.start(binary, store, 100_000_000)
    try:
        host, port = url.removeprefix("http://").split("/")[0].rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port))
        start = time.perf_counter()
        for b in bodies:
            conn.request("POST", "/v1/metrics", b, {"Content-Type": "application/x-protobuf"})
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                sys.exit(f"{binary}: HTTP {r.status}")
        secs = time.perf_counter() - start
        conn.close()
    finally:
        srv.terminate()
        srv.wait()
    # Gauge 1 + histogram 4 buckets + count + sum per point and request.
    want = len(bodies) * args.points * 7
    out = subprocess.run([binary, "sql", "--data-dir", store, "--format", "csv", "SELECT count(*) FROM samples WHERE metric LIKE 'gpu_util%' OR metric LIKE 'step_seconds%'"],
                         capture_output=True, text=True, check=True).stdout.split()[-1]
    shutil.rmtree(tmp, ignore_errors=True)
    if int(out) != want:
        sys.exit(f"{binary}: stored {out} samples, sent {want}")
    return len(bodies) * args.points * 2 / secs


bodies = [body(i) for i in range(args.requests)]
res = {"A": [], "B": []}
for _ in range(args.reps):
    for k, exe in (("A", args.a), ("B", args.b)):
        res[k].append(run(exe, bodies))
        print(f"{k}: {res[k][-1]:,.0f} points/s", flush=True)
med = {k: statistics.median(v) for k, v in res.items()}
print(f"median A {med['A']:,.0f}  B {med['B']:,.0f} points/s  B/A {med['B'] / med['A']:.3f}")
