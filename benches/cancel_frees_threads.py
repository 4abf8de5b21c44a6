#!/usr/bin/env python3
"""How soon a server's statement threads are free again after heavy statements are cancelled.

  python3 benches/cancel_frees_threads.py LOCKSTEP_BINARY [PORT]

Starts `lockstep serve` on an empty store (PostgreSQL listener on 127.0.0.1:PORT, default
55501), runs two `lag_corr` statements over 10 million generated rows at once on two
connections (as many as the 2-core machine has statement threads), cancels both after 8 s
(psycopg's `conn.cancel()`, a PostgreSQL cancel request), and then times one small statement
on a third connection: how long the server takes to run it is how long the cancelled
statements kept their threads. A `lag_corr` over one long series computes without yielding;
before the statement's stop flag (commit 712a9b2, `lockstep_engine::analysis::interrupt`)
it ran to its end (about 24 s) after the cancel.
"""
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psycopg

binary = sys.argv[1]
port = sys.argv[2] if len(sys.argv) > 2 else "55501"
store = tempfile.mkdtemp(prefix="lockstep-cancel-")
server = subprocess.Popen(
    [binary, "serve", "--data-dir", store + "/db", "--listen", "127.0.0.1:0", "--pg-listen", f"127.0.0.1:{port}",
     "--query-timeout-secs", "120"],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
url = f"postgresql://bench@127.0.0.1:{port}/lockstep"
for _ in range(200):
    try:
        psycopg.connect(url).close()
        break
    except psycopg.OperationalError:
        time.sleep(0.1)
heavy = ("SELECT lag_corr(t, x, x) FROM (SELECT i * 1000000000 AS t, CAST(i % 7 AS DOUBLE) AS x "
         "FROM generate_series(1, 10000000) g(i)) v")
errors = []
# Late enough that both are past generating and collecting their rows, inside the analysis.
CANCEL_AFTER = 8.0


def run():
    conn = psycopg.connect(url, autocommit=True)
    threading.Timer(CANCEL_AFTER, conn.cancel).start()
    try:
        conn.execute(heavy).fetchall()
    except psycopg.Error as e:
        errors.append(e.sqlstate)


threads = [threading.Thread(target=run) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
started = time.time()
psycopg.connect(url, autocommit=True).execute("SELECT count(*) FROM generate_series(1, 1000)").fetchall()
waited = time.time() - started
print(f"{binary}: cancelled {errors}; the next small statement took {waited:.2f} s")
server.send_signal(signal.SIGTERM)
server.wait()
