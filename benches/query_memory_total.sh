#!/bin/bash
# N memory-heavy statements at once over psql against `lockstep serve` (each a hash join of two
# ROWS-row series, --query-memory-limit-mb 1024): the server's peak resident memory and each
# statement's outcome under --query-memory-total-mb TOTAL_MB (0 = no shared limit).
# usage: benches/query_memory_total.sh BIN TOTAL_MB [N=4] [ROWS=3000000]   (needs psql)
B=$1; TOTAL=$2; N=${3:-4}; ROWS=${4:-3000000}
D=$(mktemp -d /tmp/tb-XXXX)
$B serve --data-dir $D/db --listen 127.0.0.1:0 --pg-listen 127.0.0.1:0 --insecure --query-memory-limit-mb 1024 --query-memory-total-mb $TOTAL > $D/out 2> $D/err &
S=$!; sleep 2
PORT=$(grep -o 'postgresql on 127.0.0.1:[0-9]*' $D/out | cut -d: -f2)
Q="SELECT count(*) FROM generate_series(1, $ROWS) a JOIN generate_series(1, $ROWS) b ON a.value = b.value"
for i in $(seq $N); do (psql -X -q -A -t "postgresql://lockstep@127.0.0.1:$PORT/lockstep" -c "$Q" > $D/q$i 2>&1) & done
for p in $(jobs -p); do [ "$p" != "$S" ] && wait $p; done
sleep 0.5
echo "total=$TOTAL MB: peak RSS $(grep VmHWM /proc/$S/status | awk '{print int($2/1024)}') MB"
for i in $(seq $N); do echo "  q$i: $(head -c 200 $D/q$i)"; done
kill $S; wait $S 2>/dev/null; grep -c panicked $D/err; rm -rf $D
