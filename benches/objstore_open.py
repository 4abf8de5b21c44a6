#!/usr/bin/env python3
"""Opening a store on object storage whose catalog has increments, through a slow link.

    python3 benches/objstore_open.py BINARY [BINARY ...] [--delay-ms 20] [--increments 60] [--reps 5]

Starts a moto S3 server (`pip install 'moto[server]' boto3`) and a TCP relay in front of it that
delays every client-to-server chunk by `--delay-ms` (a distant bucket: each request pays it).
With the first BINARY it writes two stores: prefix `p`, a 2,000-series snapshot and then
`--increments` imports of one new series each (each leaves a catalog increment and one data
file), and prefix `p2`, the same series imported at once (one snapshot, one data file). Then
each BINARY in turn, `--reps` times, runs `lockstep sql --data-dir FRESH --data-url
s3://lockstep/p "SELECT count(*) AS n FROM samples"` through the relay (a fresh local directory
each time, so nothing is cached); `p2` with the first binary is the reference without
increments. Prints the wall time of each run and checks the count.

With `--dataset N` it times a dataset instead: N node prefixes `ds/node-00 ...` (each a
2,000-series import of its own host), read as one store by `lockstep sql --data-url
s3://lockstep/ds` (a reader of the whole dataset opens every node).
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def relay(listen, upstream, delay):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", listen))
    srv.listen(128)

    def pipe(a, b, d):
        try:
            while data := a.recv(65536):
                if d:
                    time.sleep(d)
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def accept():
        while True:
            c, _ = srv.accept()
            u = socket.create_connection(("127.0.0.1", upstream))
            threading.Thread(target=pipe, args=(c, u, delay), daemon=True).start()
            threading.Thread(target=pipe, args=(u, c, 0), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--delay-ms", type=float, default=20)
    ap.add_argument("--increments", type=int, default=60)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dataset", type=int, default=0, metavar="N")
    a = ap.parse_args()
    moto_port, relay_port = free_port(), free_port()
    moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(moto_port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", moto_port)).close()
                break
            except OSError:
                time.sleep(0.1)
        env = dict(os.environ, AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_REGION="us-east-1",
                   AWS_ALLOW_HTTP="true", AWS_ENDPOINT_URL=f"http://127.0.0.1:{moto_port}")
        import boto3
        boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                     aws_access_key_id="test", aws_secret_access_key="test").create_bucket(Bucket="lockstep")
        relay(relay_port, moto_port, a.delay_ms / 1000)
        with tempfile.TemporaryDirectory() as tmp:
            def write(path, lines):
                with open(path, "w") as f:
                    f.write("".join(lines))
            base = [f'base{{gpu="{i}"}} 1 1767225600000\n' for i in range(2000)]
            more = [f"g{i} 1 1767225600000\n" for i in range(a.increments)]
            write(f"{tmp}/base.prom", base)
            write(f"{tmp}/all.prom", base + more)

            def imp(prefix, file):
                subprocess.run([a.binaries[0], "import", "--data-dir", f"{tmp}/w-{prefix}", "--data-url",
                                f"s3://lockstep/{prefix}", "--host", "h0", file], env=env, check=True,
                               stdout=subprocess.DEVNULL)
            if a.dataset:
                for i in range(a.dataset):
                    subprocess.run([a.binaries[0], "import", "--data-dir", f"{tmp}/w-{i}", "--data-url",
                                    f"s3://lockstep/ds/node-{i:02}", "--host", f"h{i}", f"{tmp}/base.prom"],
                                   env=env, check=True, stdout=subprocess.DEVNULL)
                want = 2000 * a.dataset
                runs = [(b, "ds") for b in a.binaries]
            else:
                imp("p", f"{tmp}/base.prom")
                for i, line in enumerate(more):
                    write(f"{tmp}/g.prom", [line])
                    imp("p", f"{tmp}/g.prom")
                imp("p2", f"{tmp}/all.prom")
                want = 2000 + a.increments
                runs = [(b, "p") for b in a.binaries] + [(a.binaries[0], "p2")]
            slow = dict(env, AWS_ENDPOINT_URL=f"http://127.0.0.1:{relay_port}")
            for rep in range(a.reps):
                for binary, prefix in runs:
                    reader = tempfile.mkdtemp(dir=tmp)
                    t = time.perf_counter()
                    out = subprocess.run([binary, "sql", "--data-dir", reader, "--data-url", f"s3://lockstep/{prefix}",
                                          "--format", "csv", "SELECT count(*) AS n FROM samples"],
                                         env=slow, capture_output=True, text=True, check=True).stdout.split()
                    ms = 1e3 * (time.perf_counter() - t)
                    assert int(out[-1]) == want, f"{out} != {want}"
                    print(f"rep {rep} {binary} {prefix}: {ms:.0f} ms", flush=True)
    finally:
        moto.kill()


if __name__ == "__main__":
    main()
