"""Ingest load: `lockstep serve` (durable acks over gRPC) vs VictoriaMetrics, plus an overload run.

Usage (after `cargo build --release --features load-generator --bin lockstep --bin lockstep-load`; Debian `victoria-metrics` installed):

    python3 benches/ingest_load.py                      # 10 M samples, 4 clients
    python3 benches/ingest_load.py --samples 2000000    # quicker
    python3 benches/ingest_load.py --no-vm --no-overload
    python3 benches/ingest_load.py --repeat 5 --no-vm-native

Throughput run: `lockstep-load` (the load generator, a separate dev-only binary) starts N
clients, each with its own connection and 40 hosts x 60 series = 2,400 series, and streams
pre-built batches of 2,400 series x 5 consecutive 1 s scrapes = 12,000 samples
(`WriteStream`, 4 batches in flight per client, `WriteRequest.columns`) until the fixed sample count is acknowledged.
Every acknowledgement is sent only after the batch's WAL record is fsynced. Reported:
acknowledged samples/s, p50/p99 ack latency (send of a batch to its ack), the server's peak
RSS (sampled from /proc every 50 ms), and afterwards the stored count (`lockstep sql`) must
equal the acknowledged count.

VictoriaMetrics gets exactly the same samples (dumped by `lockstep-load --dump-vm`, timestamps
floored to ms since that is VM's unit), one body per batch, N concurrent HTTP connections,
bodies in memory before the clock starts, then `/internal/force_flush`, each format into a
fresh instance whose stored count is then checked: JSON lines (`/api/v1/import`) and
Prometheus remote write (`/api/v1/write`, protobuf + snappy; needs `pip install cramjam`).
The ratio of each pair is taken against the faster of the two. VM acknowledges a body once it
is parsed into its in-memory buffers, not after an fsync, so its acks are not durable. A
reference row times `/api/v1/import/native`, VM's own block format re-imported from an export
of the JSON instance (one body per client): a migration path, only for data already in a VM.

Overload runs (one per `--overload-memory-mb` limit): 32 clients with 16 batches in flight each
against a server limited to 2 writes in flight, a memory limit and a 100 ms admission wait (a
stream batch that finds no write slot within it ends the stream with RESOURCE_EXHAUSTED); reports
rejects (retried after the server's hint), peak RSS against the limit, and checks that every
acknowledged sample is stored. Under a memory limit the server also shrinks its HTTP/2 windows,
so much of the overload is held back by flow control on the clients' side rather than refused.

The client sends `WriteRequest.columns` (four packed arrays per batch); `--form series` on
`lockstep-load` sends one `SeriesSamples` per series instead.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `lockstep-load`'s default first timestamp, 2026-01-01T00:00:00Z, in seconds.
BENCH_START_S = 1_767_225_600


class RssSampler(threading.Thread):
    """Samples VmRSS of a pid every 50 ms; `.peak` in bytes."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.peak = max(self.peak, int(line.split()[1]) * 1024)
            except OSError:
                return
            time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_binary(binary: Path) -> Path:
    """The load generator built beside the `lockstep` binary."""
    load = binary.with_name("lockstep-load")
    if not load.exists():
        raise SystemExit(f"{load} missing: cargo build --release --features load-generator --bin lockstep-load")
    return load


def start_server(binary: Path, data: Path, extra: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [str(binary), "serve", "--data-dir", str(data), "--listen", "127.0.0.1:0", "--insecure", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        raise SystemExit(f"server did not start: {line}{proc.stderr.read()}")
    return proc, "http://" + line.split()[2]


def stop_server(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"server exited {proc.returncode}: {err}")
    return err


def stored_count(binary: Path, data: Path) -> int:
    out = subprocess.run(
        [str(binary), "sql", "--data-dir", str(data), "--format", "json",
         "SELECT count(*) AS n FROM samples WHERE metric NOT LIKE 'lockstep_ingest_%' AND metric NOT LIKE 'lockstep_store_%'"],
        check=True, capture_output=True, text=True,
    ).stdout
    return int(json.loads(out.splitlines()[0])["n"])


def run_lockstep(binary: Path, work: Path, args, name: str, server_extra: list[str], client_extra: list[str]) -> dict:
    data = work / f"lockstep-{name}"
    proc, url = start_server(binary, data, server_extra)
    rss = RssSampler(proc.pid)
    rss.start()
    try:
        out = subprocess.run(
            [str(load_binary(binary)), "--addr", url, "--samples", str(args.samples), *client_extra],
            check=True, capture_output=True, text=True,
        ).stdout
    finally:
        rss.stop.set()
        err = stop_server(proc)
    res = json.loads(out.strip().splitlines()[-1])
    res["peak_rss"] = rss.peak
    res["stored"] = stored_count(binary, data)
    res["server_log"] = err.strip().splitlines()[-1:] if err.strip() else []
    shutil.rmtree(data)
    return res


def run_lockstep_remote_write(binary: Path, work: Path, bodies: list[list[bytes]], total: int) -> dict:
    """`lockstep serve --http-listen` taking the same Prometheus remote-write bodies as VM, one
    HTTP/1.1 connection per client; each 204 follows the WAL fsync of its samples. The stored
    count is checked afterwards."""
    data = work / "lockstep-remote-write"
    port = free_port()
    proc, _ = start_server(binary, data, ["--http-listen", f"127.0.0.1:{port}"])
    rss = RssSampler(proc.pid)
    rss.start()
    try:
        secs, lat = post_all(port, bodies, "/api/v1/write", REMOTE_WRITE_HEADERS, force_flush=False)
    finally:
        rss.stop.set()
        stop_server(proc)
    row = vm_row(total, secs, lat, rss.peak)
    row["stored"] = stored_count(binary, data)
    shutil.rmtree(data)
    return row


def start_vm(vm: str, work: Path, name: str) -> tuple[subprocess.Popen, int, Path]:
    port = free_port()
    path = work / f"vm-data-{name}"
    log = open(work / f"vm-{name}.log", "w")
    proc = subprocess.Popen(
        [vm, f"-httpListenAddr=127.0.0.1:{port}", f"-storageDataPath={path}", "-retentionPeriod=100y"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    log.close()
    for _ in range(200):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.read().strip() == b"OK":
                    return proc, port, path
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("victoria-metrics did not become healthy")


def stop_vm(proc: subprocess.Popen, path: Path) -> None:
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    shutil.rmtree(path, ignore_errors=True)


def post_all(port: int, bodies_per_client: list[list[bytes]], url: str,
             headers: dict[str, str] | None = None, force_flush: bool = True) -> tuple[float, list[float]]:
    """One HTTP connection per client posting its bodies in order; then a force flush (VM)."""
    errors: list[str] = []
    lat: list[float] = []

    def post(bodies: list[bytes]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        for body in bodies:
            t = time.perf_counter()
            conn.request("POST", url, body=body, headers=headers or {})
            r = conn.getresponse()
            r.read()
            lat.append(time.perf_counter() - t)
            if r.status not in (200, 204):
                errors.append(f"{url} returned {r.status}")
        conn.close()

    start = time.perf_counter()
    workers = [threading.Thread(target=post, args=(b,)) for b in bodies_per_client]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if force_flush:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/internal/force_flush", timeout=600) as r:
            r.read()
    secs = time.perf_counter() - start
    if errors:
        raise SystemExit(f"import into port {port} failed: {errors[:3]}")
    return secs, sorted(lat)


def vm_sample_count(port: int) -> int:
    """Samples stored in a VictoriaMetrics instance (the benchmark's data spans < 1 day)."""
    at = BENCH_START_S + 86_400 - 1
    q = urllib.parse.quote('sum(count_over_time({__name__!=""}[1d]))')
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?query={q}&time={at}", timeout=600) as r:
        res = json.loads(r.read())["data"]["result"]
    return int(float(res[0]["value"][1])) if res else 0


def vm_row(total: int, secs: float, lat: list[float], peak: int) -> dict:
    pick = lambda q: lat[min(len(lat) - 1, round((len(lat) - 1) * q))] * 1e3 if lat else 0.0
    return {"acked_samples": total, "seconds": secs, "samples_per_s": total / secs, "p50_ms": pick(0.5),
            "p99_ms": pick(0.99), "peak_rss": peak, "overload_rejects": 0}


def _varint(x: int) -> bytes:
    out = bytearray()
    while x >= 0x80:
        out.append((x & 0x7F) | 0x80)
        x >>= 7
    out.append(x)
    return bytes(out)


def _len_field(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def remote_write_body(jsonl: bytes) -> bytes:
    """A VM JSON-lines body as a Prometheus remote-write request (protobuf, snappy block)."""
    import cramjam  # pip install cramjam (only needed for this row)

    out = bytearray()
    for line in jsonl.splitlines():
        if not line.strip():
            continue
        o = json.loads(line)
        ts = bytearray()
        for k, v in sorted(o["metric"].items()):
            ts += _len_field(1, _len_field(1, k.encode()) + _len_field(2, str(v).encode()))
        for v, t in zip(o["values"], o["timestamps"]):
            ts += _len_field(2, b"\x09" + struct.pack("<d", float(v)) + b"\x10" + _varint(t))
        out += _len_field(1, bytes(ts))
    return bytes(cramjam.snappy.compress_raw(bytes(out)))


REMOTE_WRITE_HEADERS = {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf",
                        "X-Prometheus-Remote-Write-Version": "0.1.0"}


def vm_bodies(binary: Path, work: Path, args) -> dict[str, list[list[bytes]]]:
    """The benchmark's batches as VM JSON-lines bodies and remote-write bodies (cached)."""
    cache = work / "vm-bodies.json"
    if cache.exists():
        return {k: [[bytes.fromhex(b) for b in c] for c in v] for k, v in json.loads(cache.read_text()).items()}
    dump = work / "vm-bodies"
    subprocess.run(
        [str(load_binary(binary)), "--addr", "http://unused", "--samples", str(args.samples),
         "--clients", str(args.clients), "--points", str(args.points), "--dump-vm", str(dump), "--no-send"],
        check=True,
    )
    jsonl = [[b.encode() + b"\n" for b in p.read_text().split("\n\n") if b.strip()] for p in sorted(dump.iterdir())]
    shutil.rmtree(dump)
    bodies = {"json": jsonl}
    if args.vm_remote_write:
        bodies["remote-write"] = [[remote_write_body(b) for b in c] for c in jsonl]
    cache.write_text(json.dumps({k: [[b.hex() for b in c] for c in v] for k, v in bodies.items()}))
    return bodies


def timed_import(vm: str, work: Path, name: str, bodies: list[list[bytes]], url: str, total: int,
                 headers: dict[str, str] | None = None, before_stop=None) -> dict:
    """Posts `bodies` into a fresh VictoriaMetrics instance and checks that it stored `total`
    samples; `before_stop(port)` runs while the instance is still up."""
    proc, port, path = start_vm(vm, work, name)
    rss = RssSampler(proc.pid)
    try:
        rss.start()
        secs, lat = post_all(port, bodies, url, headers)
        rss.stop.set()
        stored = vm_sample_count(port)
        if before_stop is not None:
            before_stop(port)
    finally:
        rss.stop.set()
        stop_vm(proc, path)
    if stored != total:
        raise SystemExit(f"victoria-metrics {name} import stored {stored:,} of {total:,} samples")
    return vm_row(total, secs, lat, rss.peak)


def run_vm(vm: str, binary: Path, work: Path, args) -> dict[str, dict]:
    """VictoriaMetrics ingesting the benchmark's batches, each format into a fresh instance:
    `json` (/api/v1/import), `remote-write` (/api/v1/write) and, as a reference, `native`
    (/api/v1/import/native of the JSON instance's own export, one body per client). Every
    instance's stored sample count is checked."""
    bodies = vm_bodies(binary, work, args)
    total = sum(b.count(b"\n") for c in bodies["json"] for b in c) * args.points
    natives: list[list[bytes]] = []

    def export_native(port: int) -> None:
        for c in range(len(bodies["json"])):
            q = urllib.parse.quote(f'{{host=~"c{c}-.*"}}')
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/export/native?match[]={q}", timeout=600) as r:
                natives.append([r.read()])

    rows = {"json": timed_import(vm, work, "json", bodies["json"], "/api/v1/import", total,
                                 before_stop=export_native if args.vm_native else None)}
    if "remote-write" in bodies:
        rows["remote-write"] = timed_import(vm, work, "remote-write", bodies["remote-write"], "/api/v1/write",
                                            total, REMOTE_WRITE_HEADERS)
    if natives:
        rows["native"] = timed_import(vm, work, "native", natives, "/api/v1/import/native", total)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", type=Path, default=ROOT / "target/release/lockstep")
    ap.add_argument("--samples", type=int, default=10_000_000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--points", type=int, default=5, help="1 s scrapes per series in one batch")
    ap.add_argument("--victoria-metrics", default=shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics")
    ap.add_argument("--no-vm", action="store_true")
    ap.add_argument("--vm-remote-write", action=argparse.BooleanOptionalAction, default=True,
                    help="also time Prometheus remote write into VictoriaMetrics (needs `pip install cramjam`)")
    ap.add_argument("--vm-native", action=argparse.BooleanOptionalAction, default=True,
                    help="also time VictoriaMetrics' native import of the same samples (reference row)")
    ap.add_argument("--repeat", type=int, default=3, help="Lockstep/VictoriaMetrics throughput pairs (median ratio)")
    ap.add_argument("--remote-write-only", action="store_true",
                    help="only the remote-write pairs: lockstep serve /api/v1/write vs VictoriaMetrics /api/v1/write")
    ap.add_argument("--no-overload", action="store_true")
    ap.add_argument("--overload-clients", type=int, default=32)
    ap.add_argument("--overload-memory-mb", default="512,256",
                    help="comma-separated memory limits, one overload run each")
    args = ap.parse_args()
    if not args.binary.exists():
        raise SystemExit(f"{args.binary} missing: cargo build --release --features load-generator --bin lockstep --bin lockstep-load")
    rows = []
    with tempfile.TemporaryDirectory(prefix="lockstep-ingest-load-") as tmp:
        work = Path(tmp)
        # Alternating pairs: the machine is shared, so each ratio compares neighbours in time.
        if args.remote_write_only:
            bodies = vm_bodies(args.binary, work, args)["remote-write"]
            jsonl = vm_bodies(args.binary, work, args)["json"]
            total = sum(b.count(b"\n") for c in jsonl for b in c) * args.points
            for k in range(args.repeat):
                tag = f" #{k + 1}" if args.repeat > 1 else ""
                r = run_lockstep_remote_write(args.binary, work, bodies, total)
                rows.append((f"lockstep serve /api/v1/write (Prometheus remote write, fsynced acks){tag}", r))
                v = timed_import(args.victoria_metrics, work, "remote-write", bodies, "/api/v1/write", total,
                                 REMOTE_WRITE_HEADERS)
                v["rw_ratio"] = r["samples_per_s"] / v["samples_per_s"]
                rows.append((f"victoria-metrics /api/v1/write (Prometheus remote write), acks not fsynced{tag}", v))
        for k in range(0 if args.remote_write_only else args.repeat):
            tag = f" #{k + 1}" if args.repeat > 1 else ""
            r = run_lockstep(args.binary, work, args, "throughput", [],
                             ["--clients", str(args.clients), "--window", str(args.window), "--points", str(args.points)])
            rows.append((f"lockstep serve (WriteStream, fsynced acks){tag}", r))
            if not args.no_vm:
                vm = run_vm(args.victoria_metrics, args.binary, work, args)
                # The target compares against VM's fastest path for samples from outside it.
                best = max((vm[k] for k in ("json", "remote-write") if k in vm), key=lambda x: x["samples_per_s"])
                best["pair_ratio"] = r["samples_per_s"] / best["samples_per_s"]
                best["fastest"] = True
                labels = {"json": "/api/v1/import (JSON lines)", "remote-write": "/api/v1/write (Prometheus remote write)",
                          "native": "/api/v1/import/native, re-import of its own export (reference)"}
                for k in ("json", "remote-write", "native"):
                    if k in vm:
                        if k == "native":
                            vm[k]["native_ratio"] = r["samples_per_s"] / vm[k]["samples_per_s"]
                        mark = " *" if vm[k].get("fastest") else ""
                        rows.append((f"victoria-metrics {labels[k]}, acks not fsynced{tag}{mark}", vm[k]))
        if not args.no_overload and not args.remote_write_only:
            overload_config = work / "overload.toml"
            overload_config.write_text("[limits]\nadmission_wait_ms = 100\n")
            for mb in [int(x) for x in str(args.overload_memory_mb).split(",") if x.strip()]:
                r = run_lockstep(
                    args.binary, work, args, f"overload-{mb}",
                    ["--max-in-flight", "2", "--memory-limit-mb", str(mb), "--config", str(overload_config)],
                    ["--clients", str(args.overload_clients), "--window", "16", "--points", str(args.points)],
                )
                r["limit_mb"] = mb
                rows.append((f"lockstep overload ({args.overload_clients} clients x 16 in flight, 2 slots, 100 ms wait, {mb} MiB limit)", r))
    print(f"\nsamples: {args.samples:,}, clients: {args.clients}, machine: {os.cpu_count()} cores, load avg {os.getloadavg()[0]:.1f}\n")
    print("| run | acked samples | samples/s | p50 ack ms | p99 ack ms | peak RSS MiB | overload rejects | stored = acked |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, r in rows:
        stored = r.get("stored")
        check = "" if stored is None else ("yes" if stored == r["acked_samples"] else f"NO ({stored:,})")
        print(f"| {name} | {r['acked_samples']:,} | {r['samples_per_s']:,.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} "
              f"| {r['peak_rss'] / 2**20:.0f} | {r['overload_rejects']:,} | {check} |")
    for name, r in rows:
        if "limit_mb" in r:
            peak = r["peak_rss"] / 2**20
            print(f"{name}: peak RSS {peak:.0f} MiB {'under' if peak < r['limit_mb'] else 'OVER'} the limit")
    ratios = sorted(r["pair_ratio"] for _, r in rows if "pair_ratio" in r)
    if ratios:
        median = ratios[len(ratios) // 2]
        print(f"\nLockstep / VictoriaMetrics (fastest of JSON lines and remote write in each pair, marked *): "
              f"{', '.join(f'{x:.2f}x' for x in ratios)}; "
              f"median {median:.2f}x (target >= 2x: {'MET' if median >= 2 else 'MISSED'})")
    rw = sorted(r["rw_ratio"] for _, r in rows if "rw_ratio" in r)
    if rw:
        median = rw[len(rw) // 2]
        print(f"\nLockstep / VictoriaMetrics, both over Prometheus remote write, per pair: "
              f"{', '.join(f'{x:.2f}x' for x in rw)}; median {median:.2f}x (target >= 2x: {'MET' if median >= 2 else 'MISSED'})")
    native = sorted(r["native_ratio"] for _, r in rows if "native_ratio" in r)
    if native:
        print(f"Lockstep / VictoriaMetrics native re-import (reference, not the target's path): "
              f"{', '.join(f'{x:.2f}x' for x in native)}; median {native[len(native) // 2]:.2f}x")
    bad = [n for n, r in rows if r.get("stored") is not None and r["stored"] != r["acked_samples"]]
    if bad:
        raise SystemExit(f"acknowledged samples missing in: {bad}")


if __name__ == "__main__":
    main()
