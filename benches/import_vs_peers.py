#!/usr/bin/env python3
"""Import speed and storage size: Lockstep vs DuckDB vs VictoriaMetrics (issue 2).

Usage:
    python3 benches/import_vs_peers.py                 # smoke run (~360 k samples)
    python3 benches/import_vs_peers.py --bundle DIR    # an existing bundle, e.g. real data by path
    python3 benches/import_vs_peers.py --full          # 3,000 series x 3,600 s = 10.8 M samples
    python3 benches/import_vs_peers.py --samples N     # about N samples

Generates realistic telemetry with a fixed seed (60 series per host: ~60 % monotone integer
counters with scrape-like increments, ~35 % slowly moving gauges with 1-2 decimals, ~5 % noisy
full-precision floats; labels host, device, job; 1 s scrape interval) and writes it as
`samples.parquet` bundles in scrape (time-major) row order:

- `ms`: scrape timestamps with millisecond jitter (what VictoriaMetrics keeps exactly);
- `ms-gauges`, `ms-counters`: the gauge and counter series of `ms` alone;
- `ns`: every sample stamped with its own nanosecond-jittered time. VictoriaMetrics keeps only
  milliseconds, so its row for this dataset is lossy and marked so; Lockstep and DuckDB keep the
  nanoseconds exactly.

For each dataset it measures, in the same run:
- Lockstep: `lockstep import --data-dir DIR BUNDLE` (release binary); samples/s as printed by the
  importer and over the wall time of the whole command (import, compaction, close); bytes on disk
  = `data/` + `series.json`;
- DuckDB (Python package): `CREATE TABLE AS SELECT * FROM read_parquet(...)` into a database file,
  then `CHECKPOINT`; once in file order and once sorted by series then time; bytes = the file;
- VictoriaMetrics (`/usr/bin/victoria-metrics`, Debian package) on 127.0.0.1 with a free port and
  a temporary storage path: JSON-lines `/api/v1/import` (one line per series, two concurrent
  connections, bodies prepared before the clock starts) and `/internal/force_flush`; then
  `/internal/force_merge`, a graceful stop, and bytes = `data/` + `indexdb/` of the storage path
  (the `cache/` it persists on shutdown is left out).

Prints a Markdown table (dataset | system | samples/s | bytes/sample | ratios), the Lockstep
per-column storage breakdown, and the issue's targets with PASS/MISS.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
SEED = 20261202
SMOKE_SAMPLES = 360_000
FULL_SERIES, FULL_SECONDS = 3_000, 3_600
IMPORT_TARGET = 3_000_000  # samples/s

# --- the per-host series template (60 series) -------------------------------------------------
# (metric, device, kind, params). Counters: (mean rate per s, start value scale).
# Gauges: (mean, step sd, mean reversion, decimals). Noisy: generator name.
PORTS = ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1"]
DISKS = ["nvme0n1", "nvme1n1"]
GPUS = [f"gpu{i}" for i in range(8)]


def host_template() -> list[tuple[str, str | None, str, tuple]]:
    t: list[tuple[str, str | None, str, tuple]] = []
    for p in PORTS:
        t += [
            ("ib_port_xmit_data_bytes_total", p, "counter", (2.0e9, 1e13)),
            ("ib_port_rcv_data_bytes_total", p, "counter", (2.0e9, 1e13)),
            ("ib_port_xmit_packets_total", p, "counter", (5.0e5, 1e10)),
            ("ib_port_rcv_packets_total", p, "counter", (5.0e5, 1e10)),
            ("ib_port_xmit_wait_total", p, "counter", (1.0e4, 1e8)),
            ("ib_port_symbol_error_total", p, "counter", (0.002, 10)),
        ]
    for d in DISKS:
        t += [
            ("disk_read_bytes_total", d, "counter", (2.0e8, 1e12)),
            ("disk_written_bytes_total", d, "counter", (5.0e7, 1e12)),
            ("disk_reads_completed_total", d, "counter", (2.0e3, 1e8)),
            ("disk_writes_completed_total", d, "counter", (5.0e2, 1e8)),
            ("disk_io_time_ms_total", d, "counter", (300.0, 1e9)),
            ("disk_io_errors_total", d, "counter", (0.0005, 3)),
        ]
    for g in GPUS:
        t += [
            ("gpu_temperature_celsius", g, "gauge", (62.0, 0.05, 0.002, 1)),
            ("gpu_power_watts", g, "gauge", (380.0, 0.6, 0.02, 2)),
        ]
    t += [
        ("node_load1", None, "gauge", (24.0, 0.05, 0.01, 2)),
        ("node_memory_available_gib", None, "gauge", (900.0, 0.02, 0.001, 2)),
        ("node_filesystem_used_percent", None, "gauge", (41.0, 0.002, 0.0, 1)),
        ("node_cpu_temperature_celsius", None, "gauge", (55.0, 0.05, 0.005, 1)),
        ("node_cpu_frequency_ghz", None, "gauge", (2.8, 0.005, 0.05, 2)),
        ("training_step_time_seconds", None, "noisy", ("step",)),
        ("training_loss", None, "noisy", ("loss",)),
        ("dataloader_wait_seconds", None, "noisy", ("wait",)),
    ]
    return t


# --- data generation ------------------------------------------------------------------------------
@dataclass
class Data:
    """Samples as (time step x series) matrices, plus per-series labels."""

    time_ms: np.ndarray  # (T, S) int64 ms, scrape times
    time_ns: np.ndarray  # (T, S) int64 ns, per-sample nanosecond-jittered times
    value: np.ndarray  # (T, S) float64
    host: list[str]
    metric: list[str]
    device: list[str | None]
    job: list[str | None]
    kind: np.ndarray  # (S,) str


def generate(n_series: int, seconds: int, base_s: int) -> Data:
    rng = np.random.default_rng(SEED)
    tmpl = host_template()
    hosts = math.ceil(n_series / len(tmpl))
    meta = [(f"node-{h:03d}",) + s for h in range(hosts) for s in tmpl][:n_series]
    S, T = len(meta), seconds
    host_names = [m[0] for m in meta]
    host_idx = np.array([int(m[0][5:]) for m in meta])
    kind = np.array([m[3] for m in meta])

    # Scrape times: a per-host phase and a small per-scrape jitter (whole milliseconds).
    phase = rng.integers(0, 1000, hosts)
    jitter = np.minimum(rng.poisson(1.5, (T, hosts)), 25)
    scrape_ms = base_s * 1000 + np.arange(T)[:, None] * 1000 + phase[None, :] + jitter
    time_ms = scrape_ms[:, host_idx]
    # Nanosecond stamps: each sample read at its own moment within 0-2 ms after the scrape.
    time_ns = time_ms * 1_000_000 + rng.integers(0, 2_000_000, (T, S))
    dt = np.diff(time_ms, axis=0, prepend=time_ms[:1] - 1000) / 1000.0

    value = np.empty((T, S))
    # Counters: Poisson increments around a per-series rate modulated by a slow load factor.
    c = np.flatnonzero(kind == "counter")
    rate = np.array([meta[i][4][0] for i in c]) * rng.lognormal(0.0, 0.5, len(c))
    start = np.floor(np.array([meta[i][4][1] for i in c]) * rng.random(len(c)))
    load = np.empty((T, len(c)))
    x = np.zeros(len(c))
    for t in range(T):
        x = 0.98 * x + rng.normal(0.0, 0.05, len(c))
        load[t] = np.exp(x)
    inc = rng.poisson(rate[None, :] * load * dt[:, c]).astype(np.float64)
    inc[0] = 0.0
    value[:, c] = start[None, :] + np.cumsum(inc, axis=0)
    # Gauges: mean-reverting random walks, rounded to 1-2 decimals.
    g = np.flatnonzero(kind == "gauge")
    p = np.array([meta[i][4] for i in g])
    mu = p[:, 0] * rng.uniform(0.9, 1.1, len(g))
    sd, rev, dec = p[:, 1], p[:, 2], p[:, 3].astype(int)
    x = mu.copy()
    raw = np.empty((T, len(g)))
    for t in range(T):
        x = x + rev * (mu - x) + rng.normal(0.0, 1.0, len(g)) * sd
        raw[t] = x
    for d in (1, 2):
        cols = dec == d
        raw[:, cols] = np.round(raw[:, cols], d)
    value[:, g] = raw
    # Noisy: full-precision floats.
    tt = np.arange(T)[:, None]
    for i in np.flatnonzero(kind == "noisy"):
        name = meta[i][4][0]
        if name == "step":
            v = 0.85 + 0.02 * rng.standard_normal(T) + (rng.random(T) < 0.01) * rng.exponential(0.5, T)
        elif name == "loss":
            v = 2.5 * np.exp(-tt[:, 0] / 5000.0) + 0.05 * rng.standard_normal(T)
        else:
            v = rng.exponential(0.01, T)
        value[:, i] = v
    return Data(
        time_ms=time_ms,
        time_ns=time_ns,
        value=value,
        host=host_names,
        metric=[m[1] for m in meta],
        device=[m[2] for m in meta],
        job=["llm-70b" if m[3] == "noisy" else None for m in meta],
        kind=kind,
    )


@dataclass
class Dataset:
    """One benchmark input: columns selected from `Data` and a timestamp flavour."""

    name: str
    cols: np.ndarray
    ns: bool
    note: str = ""
    bundle: Path | None = None

    def samples(self, d: Data) -> int:
        return d.value.shape[0] * len(self.cols)


def times_ns(d: Data, ds: Dataset) -> np.ndarray:
    return d.time_ns[:, ds.cols] if ds.ns else d.time_ms[:, ds.cols] * 1_000_000


def dict_col(names: list, cols: np.ndarray, T: int) -> pa.Array:
    """A dictionary-encoded string column repeating the per-series labels in time-major order."""
    vals = [names[i] for i in cols]
    uniq = sorted({v for v in vals if v is not None})
    pos = {v: k for k, v in enumerate(uniq)}
    idx = np.array([pos.get(v, -1) for v in vals], dtype=np.int32)
    idx = np.tile(idx, T)
    mask = idx < 0
    return pa.DictionaryArray.from_arrays(pa.array(idx, mask=mask if mask.any() else None), pa.array(uniq, pa.string()))


def write_bundle(d: Data, ds: Dataset, root: Path) -> Path:
    T = d.value.shape[0]
    table = pa.table(
        {
            "time": pa.array(times_ns(d, ds).ravel()),
            "host": dict_col(d.host, ds.cols, T),
            "metric": dict_col(d.metric, ds.cols, T),
            "value": pa.array(d.value[:, ds.cols].ravel()),
            "device": dict_col(d.device, ds.cols, T),
            "job": dict_col(d.job, ds.cols, T),
        }
    )
    out = root / f"bundle-{ds.name}"
    out.mkdir(parents=True)
    pq.write_table(table, out / "samples.parquet", compression="zstd")
    return out


# --- measurement helpers --------------------------------------------------------------------------
@dataclass
class Result:
    dataset: str
    system: str
    samples: int
    seconds: float
    bytes: int
    extra: dict = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.samples / self.seconds

    @property
    def bps(self) -> float:
        return self.bytes / self.samples


def tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def run_lockstep(binary: Path, ds: Dataset, n: int, work: Path) -> list[Result]:
    store = work / f"lockstep-{ds.name}"
    start = time.perf_counter()
    out = subprocess.run(
        [str(binary), "import", "--data-dir", str(store), str(ds.bundle)], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"lockstep import failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    m = re.search(r"imported (\d+) samples of (\d+) series", out.stdout)
    took = re.search(r"took ([\d.]+) s", out.stdout)
    if not m or not took or int(m.group(1)) != n:
        raise SystemExit(f"unexpected lockstep output (wanted {n} samples):\n{out.stdout}")
    size = tree_bytes(store / "data") + tree_bytes(store / "series.json")
    cols: dict[str, int] = {}
    for f in (store / "data").rglob("*.parquet"):
        md = pq.ParquetFile(f).metadata
        for rg in range(md.num_row_groups):
            for c in range(md.num_columns):
                col = md.row_group(rg).column(c)
                cols[col.path_in_schema] = cols.get(col.path_in_schema, 0) + col.total_compressed_size
    extra = {"columns": cols, "store_total": tree_bytes(store), "series_json": tree_bytes(store / "series.json")}
    importer = Result(ds.name, "lockstep (importer's own timer)", n, float(took.group(1)), size, extra)
    whole = Result(ds.name, "lockstep (wall: import+compact+close)", n, wall, size, extra)
    shutil.rmtree(store)
    return [importer, whole]


def run_duckdb(ds: Dataset, n: int, work: Path) -> list[Result]:
    res = []
    for label, order in (("duckdb (file order)", ""), ("duckdb (sorted by series, time)", " ORDER BY host, metric, device, job, time")):
        db = work / f"duck-{ds.name}.duckdb"
        start = time.perf_counter()
        con = duckdb.connect(str(db))
        con.execute(f"CREATE TABLE samples AS SELECT * FROM read_parquet('{ds.bundle / 'samples.parquet'}'){order}")
        con.execute("CHECKPOINT")
        got = con.execute("SELECT count(*) FROM samples").fetchone()[0]
        con.close()
        secs = time.perf_counter() - start
        if got != n:
            raise SystemExit(f"duckdb loaded {got} rows, wanted {n}")
        res.append(Result(ds.name, label, n, secs, tree_bytes(db) + (tree_bytes(Path(f"{db}.wal")) if Path(f"{db}.wal").exists() else 0)))
        db.unlink()
    return res


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vm_bodies(d: Data, ds: Dataset, chunk_series: int = 100) -> list[bytes]:
    """JSON-lines bodies, one line per series; nanosecond stamps are floored to ms (VM's unit)."""
    ts_ms = times_ns(d, ds) // 1_000_000
    lines = []
    for j, s in enumerate(ds.cols):
        labels = {"__name__": d.metric[s], "host": d.host[s]}
        if d.device[s]:
            labels["device"] = d.device[s]
        if d.job[s]:
            labels["job"] = d.job[s]
        lines.append(
            '{"metric":' + json.dumps(labels) + ',"values":' + json.dumps(d.value[:, s].tolist())
            + ',"timestamps":' + json.dumps(ts_ms[:, j].tolist()) + "}\n"
        )
    return ["".join(lines[i : i + chunk_series]).encode() for i in range(0, len(lines), chunk_series)]


def http_get(port: int, path: str, timeout: float = 600) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.read().decode()


def run_vm(binary: str, d: Data, ds: Dataset, n: int, work: Path, threads: int) -> Result:
    end_s = int(times_ns(d, ds).max() // 1_000_000_000) + 1
    label = "victoria-metrics" + (" (ms-rounded: lossy)" if ds.ns else "")
    return run_vm_bodies(binary, vm_bodies(d, ds), end_s, ds.name, label, n, work, threads)


def run_vm_bodies(binary: str, bodies: list[bytes], end_s: int, name: str, label: str, n: int, work: Path,
                  threads: int) -> Result:
    """Imports JSON-lines `bodies` into a fresh VictoriaMetrics; checks the count at `end_s`."""
    port = free_port()
    path = work / f"vm-{name}"
    log = open(work / f"vm-{name}.log", "w")
    proc = subprocess.Popen(
        [binary, f"-httpListenAddr=127.0.0.1:{port}", f"-storageDataPath={path}", "-retentionPeriod=100y", "-loggerLevel=INFO"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        for _ in range(200):
            try:
                if http_get(port, "/health", 1).strip() == "OK":
                    break
            except OSError:
                time.sleep(0.05)
        else:
            raise SystemExit("victoria-metrics did not become healthy")
        errors: list[str] = []

        def post(part: list[bytes]) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            for body in part:
                conn.request("POST", "/api/v1/import", body=body)
                r = conn.getresponse()
                r.read()
                if r.status != 204:
                    errors.append(f"import returned {r.status}")
            conn.close()

        start = time.perf_counter()
        workers = [threading.Thread(target=post, args=(bodies[i::threads],)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        http_get(port, "/internal/force_flush")
        secs = time.perf_counter() - start
        if errors:
            raise SystemExit(f"victoria-metrics import failed: {errors[:3]}")
        # Check the sample count, then merge every partition fully.
        q = urllib.parse.quote('sum(count_over_time({__name__!=""}[100d]))')
        got = json.loads(http_get(port, f"/api/v1/query?query={q}&time={end_s}"))["data"]["result"]
        got = int(float(got[0]["value"][1])) if got else 0
        if got != n:
            print(f"warning: victoria-metrics reports {got} samples, wanted {n}", file=sys.stderr)
        for part in sorted({p.name for p in (path / "data" / "small").iterdir() if p.name != "snapshots"}):
            http_get(port, f"/internal/force_merge?partition_prefix={part}")
        deadline = time.time() + 600
        while time.time() < deadline:
            text = (work / f"vm-{name}.log").read_text()
            if text.count("has been successfully finished") >= 1:
                break
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        log.close()
    # Data parts plus the inverted index; the `cache/` directory VictoriaMetrics persists on
    # shutdown (tsid and metric-name caches, sized by RAM) is not stored data and is left out.
    extra = {"data": tree_bytes(path / "data"), "indexdb": tree_bytes(path / "indexdb"), "counted": got,
             "cache": tree_bytes(path / "cache") if (path / "cache").exists() else 0, "total": tree_bytes(path)}
    size = extra["data"] + extra["indexdb"]
    shutil.rmtree(path)
    return Result(name, label, n, secs, size, extra)


def bundle_vm_bodies(samples: Path, chunk_series: int = 100) -> tuple[list[bytes], int, int, bool]:
    """A long-format `samples.parquet` as VM JSON-lines bodies, one line per series (labels:
    every column but time and value); returns (bodies, samples, end second, whether any
    timestamp has sub-millisecond digits that VM would floor)."""
    t = pq.read_table(samples)
    labels = [c for c in t.column_names if c not in ("time", "value")]
    df = t.to_pandas()
    if pa.types.is_timestamp(t.schema.field("time").type):
        df["time"] = df["time"].astype("int64")
    lossy = bool((df["time"] % 1_000_000 != 0).any())
    df["ms"] = df["time"] // 1_000_000
    lines = []
    for key, g in df.sort_values("time").groupby(labels, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        m = {("__name__" if c == "metric" else c): str(v) for c, v in zip(labels, key) if isinstance(v, str) and v}
        lines.append('{"metric":' + json.dumps(m) + ',"values":' + json.dumps(g["value"].tolist())
                     + ',"timestamps":' + json.dumps(g["ms"].tolist()) + "}\n")
    bodies = ["".join(lines[i : i + chunk_series]).encode() for i in range(0, len(lines), chunk_series)]
    return bodies, len(df), int(df["time"].max() // 1_000_000_000) + 1, lossy


def run_bundle(args, work: Path) -> None:
    """`--bundle DIR`: the same comparison on an existing bundle (e.g. real data by path)."""
    samples = args.bundle / "samples.parquet"
    if not samples.exists():
        raise SystemExit(f"{samples} not found (a bundle directory with samples.parquet)")
    n = pq.ParquetFile(samples).metadata.num_rows
    name = args.bundle.resolve().name
    ds = Dataset(name, np.arange(0), False, bundle=args.bundle)
    results = run_lockstep(args.lockstep, ds, n, work)
    if not args.no_vm:
        bodies, rows, end_s, lossy = bundle_vm_bodies(samples)
        assert rows == n
        label = "victoria-metrics" + (" (ms-rounded: lossy)" if lossy else "")
        results.append(run_vm_bodies(args.victoria_metrics, bodies, end_s, name, label, n, work, args.vm_connections))
    print(f"\nbundle {args.bundle} ({n:,} samples; {tree_bytes(samples) / n:.2f} B/sample as zstd Parquet); "
          f"machine: {os.cpu_count()} CPUs\n")
    print("| system | samples/s | bytes/sample | Lockstep/VM bytes |")
    print("|---|---:|---:|---:|")
    vm = next((r for r in results if r.system.startswith("victoria")), None)
    for r in results:
        ratio = f"{r.bps / vm.bps:.2f}x" if vm and r is not vm else ""
        print(f"| {r.system} | {r.rate:,.0f} | {r.bps:.3f} | {ratio} |")
    lock = results[0].extra
    cols = ", ".join(f"{k} {v / n:.3f}" for k, v in sorted(lock["columns"].items(), key=lambda kv: -kv[1]))
    print(f"\nLockstep B/sample by column: {cols}; series.json {lock['series_json'] / n:.3f}")
    if vm:
        print(f"VictoriaMetrics B/sample: data {vm.extra['data'] / n:.3f} + indexdb {vm.extra['indexdb'] / n:.3f} "
              f"(counted {vm.extra['counted']:,} samples)")


# --- main -----------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=SMOKE_SAMPLES, help="approximate number of samples per dataset")
    ap.add_argument("--full", action="store_true", help=f"{FULL_SERIES} series x {FULL_SECONDS} s (10.8 M samples)")
    ap.add_argument("--lockstep", type=Path, default=ROOT / "target" / "release" / "lockstep")
    ap.add_argument("--victoria-metrics", default=shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics")
    ap.add_argument("--no-vm", action="store_true", help="skip VictoriaMetrics")
    ap.add_argument("--datasets", default="ms,ms-gauges,ms-counters,ns")
    ap.add_argument("--vm-connections", type=int, default=2)
    ap.add_argument("--work-dir", type=Path, default=None, help="where bundles and stores go (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the bundles")
    ap.add_argument("--bundle", type=Path, default=None,
                    help="compare on an existing bundle directory instead (e.g. ../shared/data/roce-leaf-counters)")
    args = ap.parse_args()
    if args.bundle is not None:
        work = Path(tempfile.mkdtemp(prefix="lockstep-import-bench-", dir=args.work_dir))
        try:
            run_bundle(args, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return

    if args.full:
        n_series, seconds = FULL_SERIES, FULL_SECONDS
    else:
        seconds = min(FULL_SECONDS, max(60, args.samples // 1000))
        n_series = max(1, math.ceil(args.samples / seconds))
    if not args.lockstep.exists():
        raise SystemExit(f"{args.lockstep} not found: run `cargo build --release --bin lockstep` first")
    use_vm = not args.no_vm
    if use_vm and not Path(args.victoria_metrics).exists():
        raise SystemExit("victoria-metrics not found: `apt-get install victoria-metrics` or pass --no-vm")

    work = Path(tempfile.mkdtemp(prefix="lockstep-import-bench-", dir=args.work_dir))
    try:
        # Start the data two days back at midnight UTC: inside VictoriaMetrics' accepted window.
        base_s = (int(time.time()) // 86400 - 2) * 86400
        t0 = time.perf_counter()
        d = generate(n_series, seconds, base_s)
        kinds = {k: int((d.kind == k).sum()) for k in ("counter", "gauge", "noisy")}
        print(f"generated {d.value.size} samples: {d.value.shape[1]} series x {seconds} s "
              f"({kinds}) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        all_cols = np.arange(d.value.shape[1])
        catalog = {
            "ms": Dataset("ms", all_cols, False),
            "ms-gauges": Dataset("ms-gauges", np.flatnonzero(d.kind == "gauge"), False),
            "ms-counters": Dataset("ms-counters", np.flatnonzero(d.kind == "counter"), False),
            "ns": Dataset("ns", all_cols, True),
        }
        results: list[Result] = []
        for name in args.datasets.split(","):
            ds = catalog[name]
            n = ds.samples(d)
            ds.bundle = write_bundle(d, ds, work)
            print(f"[{name}] {n} samples; bundle {tree_bytes(ds.bundle) / n:.2f} B/sample", file=sys.stderr)
            results += run_lockstep(args.lockstep, ds, n, work)
            results += run_duckdb(ds, n, work)
            if use_vm:
                results.append(run_vm(args.victoria_metrics, d, ds, n, work, args.vm_connections))
            for r in results[-(5 if use_vm else 4):]:
                print(f"  {r.system}: {r.rate:,.0f} samples/s, {r.bps:.3f} B/sample", file=sys.stderr)
            if not args.keep:
                shutil.rmtree(ds.bundle)
        report(results, d, seconds)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}", file=sys.stderr)


def report(results: list[Result], d: Data, seconds: int) -> None:
    print(f"\n{d.value.shape[1]} series x {seconds} s at 1 s; seed {SEED}; machine: {os.cpu_count()} CPUs\n")
    print("| dataset | samples | system | samples/s | bytes/sample | Lockstep/peer bytes | Lockstep/peer speed |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for r in results:
        ls = next(x for x in results if x.dataset == r.dataset and x.system.startswith("lockstep (wall"))
        is_ls = r.system.startswith("lockstep")
        ratio_b = "" if is_ls else f"{ls.bps / r.bps:.2f}"
        ratio_s = "" if is_ls else f"{ls.rate / r.rate:.2f}x"
        print(f"| {r.dataset} | {r.samples:,} | {r.system} | {r.rate:,.0f} | {r.bps:.3f} | {ratio_b} | {ratio_s} |")
    print("\n(Lockstep/peer speed: Lockstep wall-clock samples/s divided by the peer's; bytes ratio < 1 means Lockstep is smaller.)")
    print("\nLockstep bytes/sample by column (compressed column chunks; series.json separately):\n")
    print("| dataset | " + " | ".join(["series_id", "time", "value_int", "value_scale", "value_float", "series.json", "parquet overhead"]) + " |")
    print("|---|" + "---:|" * 7)
    for r in results:
        if r.system.startswith("lockstep (wall"):
            cols = r.extra["columns"]
            parts = [cols.get(c, 0) for c in ("series_id", "time", "value_int", "value_scale", "value_float")]
            overhead = r.bytes - sum(cols.values()) - r.extra["series_json"]
            cells = [f"{b / r.samples:.3f}" for b in parts + [r.extra["series_json"], overhead]]
            print(f"| {r.dataset} | " + " | ".join(cells) + " |")
    vms = [r for r in results if r.system.startswith("victoria")]
    if vms:
        print("\nVictoriaMetrics bytes/sample split: " + "; ".join(
            f"{r.dataset}: data {r.extra['data'] / r.samples:.3f} + indexdb {r.extra['indexdb'] / r.samples:.3f}"
            f" (+ shutdown cache {r.extra['cache'] / r.samples:.3f} not counted; counted {r.extra['counted']:,} samples)" for r in vms))
    print("\nTargets:")
    for r in results:
        if r.system.startswith("lockstep (importer"):
            print(f"- {r.dataset}: import {r.rate:,.0f} samples/s (importer) >= {IMPORT_TARGET:,}: "
                  f"{'PASS' if r.rate >= IMPORT_TARGET else 'MISS'}")
        if r.system.startswith("lockstep (wall"):
            print(f"- {r.dataset}: import {r.rate:,.0f} samples/s (wall) >= {IMPORT_TARGET:,}: "
                  f"{'PASS' if r.rate >= IMPORT_TARGET else 'MISS'}")
            vm = next((v for v in vms if v.dataset == r.dataset), None)
            if vm is not None and not r.dataset.startswith("ns"):
                print(f"- {r.dataset}: {r.bps:.3f} bytes/sample < VictoriaMetrics {vm.bps:.3f}: "
                      f"{'PASS' if r.bps < vm.bps else 'MISS'}")


if __name__ == "__main__":
    main()
