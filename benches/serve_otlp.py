"""Starts `lockstep serve` with an OTLP/HTTP listener on a free port, for the bench scripts.

`start(binary, data_dir, flush_rows)` returns the server process and its OTLP/HTTP base URL
(`http://127.0.0.1:PORT`): gRPC and HTTP on port 0, no TLS, telemetry and maintenance out of
the way (hourly), flushing every `flush_rows` rows. Exits with a message if no address appears.
"""
import subprocess
import sys


def start(binary, data_dir, flush_rows):
    srv = subprocess.Popen(
        [binary, "serve", "--data-dir", data_dir, "--listen", "127.0.0.1:0", "--insecure", "--http-listen",
         "127.0.0.1:0", "--flush-rows", str(flush_rows), "--telemetry-interval-secs", "3600",
         "--maintenance-interval-secs", "3600"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for _ in range(8):
        line = srv.stdout.readline().strip()
        if line.startswith("otlp/http on "):
            return srv, line.removeprefix("otlp/http on ")
    srv.kill()
    sys.exit(f"{binary}: no otlp/http address")
