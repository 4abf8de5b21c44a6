#!/bin/bash
# Writes beside busy SQL statements: starts `lockstep serve` (empty store, --query-timeout-secs
# 3) with OTLP/HTTP and the PostgreSQL listener, measures OTLP/HTTP JSON write latency alone,
# then while N psql clients each run a `lag_corr` over ROWS generated rows (a whole-series
# aggregate that computes without yielding), and prints when each statement ended.
# usage: benches/sql_beside_ingest.sh BIN [N=2] [ROWS=3000000]   (needs psql, python3)
B=$1; N=${2:-2}; ROWS=${3:-3000000}
D=$(mktemp -d /tmp/sbi-XXXX)
$B serve --data-dir $D/db --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --pg-listen 127.0.0.1:0 --insecure \
  --query-timeout-secs 3 > $D/out 2> $D/err & S=$!
sleep 2
HTTP=$(grep -o 'otlp/http on http://[0-9.:]*' $D/out | sed 's|otlp/http on ||')
PG=$(grep -o 'postgresql on 127.0.0.1:[0-9]*' $D/out | cut -d: -f2)
cat > $D/probe.py <<'PY'
import json, sys, time, urllib.request
url, seconds = sys.argv[1], float(sys.argv[2])
lat, k, end = [], 0, time.time() + seconds
while time.time() < end:
    body = {"resourceMetrics": [{"resource": {"attributes": [{"key": "host.name", "value": {"stringValue": "probe"}}]},
        "scopeMetrics": [{"metrics": [{"name": "probe", "gauge": {"dataPoints": [{"timeUnixNano": str(time.time_ns()), "asDouble": float(k)}]}}]}]}]}
    t0 = time.time()
    urllib.request.urlopen(urllib.request.Request(url + "/v1/metrics", data=json.dumps(body).encode(),
                           headers={"Content-Type": "application/json"}), timeout=120).read()
    lat.append(time.time() - t0); k += 1; time.sleep(0.1)
lat.sort(); print(f"writes {len(lat)}: p50 {lat[len(lat)//2]*1000:.1f} ms, max {lat[-1]*1000:.1f} ms")
PY
echo "== writes alone"; python3 $D/probe.py $HTTP 3
echo "== writes beside $N statements (lag_corr over $ROWS rows, --query-timeout-secs 3)"
python3 $D/probe.py $HTTP 20 & P=$!
Q=()
for i in $(seq $N); do
  ( /usr/bin/time -f "statement $i ended after %e s" psql -X -q "postgresql://lockstep@127.0.0.1:$PG/lockstep" \
      -c "SELECT lag_corr(t, x, x) FROM (SELECT i * 1000000000 AS t, (i % 7)::double AS x FROM generate_series(1, $ROWS) g(i)) v" 2>&1 | grep -E "ERROR|ended" ) &
  Q+=($!)
done
wait $P "${Q[@]}"
kill $S; wait $S 2>/dev/null; echo "panics: $(grep -c panicked $D/err)"; rm -rf $D
