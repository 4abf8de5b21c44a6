#!/usr/bin/env python3
"""Series churn under retention: the catalog with and without the retirement of dead series.

    python3 benches/catalog_churn.py WORKDIR OLD_BINARY NEW_BINARY [--days 10] [--per-day 20000] [--reps 3]

Builds one bundle (`samples.csv`) of a churning cluster: every day of the last `--days` a new
generation of `--per-day` series (`gpu_util` of host `node-NNN`, label `pod` = `trainer-DAY-NNNNN`,
two samples each, at that day's noon), and imports it with each binary into a store of its own
under WORKDIR (`lockstep import`). Then each binary's `serve` runs on its store with
`--retention 36h --maintenance-interval-secs 1` until its first maintenance pass has dropped the
expired partitions (polled on the store's data files) and is stopped with SIGTERM (a graceful
shutdown). The old binary only drops the files; the new one also retires the series retention
left without samples. Reported per store: the series in `series.json` (live ones and retired
ids), its size, and `lockstep sql "SELECT count(*) FROM samples"` (both binaries on each store
where they can read it; a store with retired ids is refused by the old binary) timed `--reps`
times with `/usr/bin/time -v`: wall, user CPU and peak RSS. The counts must agree.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

DAY = 86_400_000_000_000


def bundle(path, days, per_day):
    os.makedirs(path)
    now = time.time_ns()
    today = now - now % DAY
    with open(os.path.join(path, "samples.csv"), "w") as f:
        f.write("time,host,metric,value,pod\n")
        for d in range(days):
            noon = today - (days - 1 - d) * DAY + DAY // 2
            # Today's noon may be ahead of now: keep the newest day's samples in the past.
            noon = min(noon, now - 3_600_000_000_000)
            for i in range(per_day):
                for k in range(2):
                    f.write(f"{noon + k * 1_000_000_000},node-{i % 500:03d},gpu_util,{(i + k) % 100},"
                            f"trainer-{d}-{i:05d}\n")


def data_files(store):
    n = 0
    for root, _, files in os.walk(os.path.join(store, "data")):
        n += sum(1 for f in files if f.endswith(".parquet"))
    return n


def expire(binary, store, keep):
    """Runs `serve` with retention until the store has `keep` data files, then stops it."""
    srv = subprocess.Popen(
        [binary, "serve", "--data-dir", store, "--listen", "127.0.0.1:0", "--insecure", "--retention", "36h",
         "--maintenance-interval-secs", "1", "--telemetry-interval-secs", "3600"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while data_files(store) > keep and time.time() < deadline:
        time.sleep(0.2)
    dropped = data_files(store) <= keep
    # The pass that dropped the files retires the series right after: let it finish. (The
    # server's shutdown flushes its self-telemetry into a file and a few series of its own.)
    time.sleep(2)
    srv.send_signal(signal.SIGTERM)
    srv.wait()
    if not dropped:
        sys.exit(f"{binary}: retention did not drop the expired partitions")


def catalog(store):
    with open(os.path.join(store, "series.json"), "rb") as f:
        raw = f.read()
    doc = json.loads(raw)
    retired = sum(end - start for start, end in doc.get("retired", []))
    return doc["version"], len(doc["series"]), retired, len(raw)


def timed(binary, store, query):
    r = subprocess.run(["/usr/bin/time", "-v", binary, "sql", "--data-dir", store, "--format", "csv", query],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    stats = {}
    for line in r.stderr.splitlines():
        key, _, value = line.strip().rpartition(": ")
        stats[key] = value
    wall = stats["Elapsed (wall clock) time (h:mm:ss or m:ss)"].split(":")
    return (r.stdout.strip().splitlines()[-1], float(wall[-2]) * 60 + float(wall[-1]),
            float(stats["User time (seconds)"]), int(stats["Maximum resident set size (kbytes)"]) // 1024)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir")
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--days", type=int, default=10)
    ap.add_argument("--per-day", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    if os.path.exists(args.workdir):
        sys.exit(f"{args.workdir} exists")
    src = os.path.join(args.workdir, "bundle")
    bundle(src, args.days, args.per_day)
    stores = {}
    for name, binary in (("old", args.old), ("new", args.new)):
        store = os.path.join(args.workdir, f"store-{name}")
        start = time.time()
        subprocess.run([binary, "import", "--data-dir", store, src], check=True, stdout=subprocess.DEVNULL)
        print(f"{name}: imported {args.days * args.per_day} series in {time.time() - start:.1f} s")
        # The partitions of the last 36 hours stay: today's noon (or an hour ago) and yesterday's.
        before = data_files(store)
        expire(binary, store, 2)
        version, live, retired, size = catalog(store)
        print(f"{name} store: {before} -> {data_files(store)} data files; series.json version {version}, "
              f"{live} series + {retired} retired ids, {size / 2**20:.1f} MiB")
        stores[name] = store
    query = "SELECT count(*) FROM samples"
    for name, store in stores.items():
        counts = set()
        for bname, binary in (("old", args.old), ("new", args.new)):
            runs = [timed(binary, store, query) for _ in range(args.reps)]
            if runs[0] is None:
                print(f"  {bname} binary on the {name} store: refused (a catalog with retired ids)")
                continue
            counts.update(r[0] for r in runs)
            walls = sorted(r[1] for r in runs)
            print(f"  {bname} binary on the {name} store: wall {walls[len(walls) // 2]:.2f} s (median of "
                  f"{args.reps}; {', '.join(f'{w:.2f}' for w in walls)}), user {runs[-1][2]:.2f} s, "
                  f"peak RSS {max(r[3] for r in runs)} MB")
        if len(counts) != 1:
            sys.exit(f"counts differ: {counts}")
        print(f"  count(*) = {counts.pop()}")


main()
