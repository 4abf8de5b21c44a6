#!/usr/bin/env bash
# Diagnosis speed: a 30-minute, 32-node (256-GPU) job with every series of it.
# Simulates the bundle once (ib-link-errors, seed 1), imports it, then runs
# `lockstep diagnose` RUNS times and reports the diagnosis' own timer (elapsed_ms: scan +
# correction + features + verdict) and the process wall time (includes opening the store).
# Usage: benches/diagnose_speed.sh [RUNS]   (needs a release build; builds it if missing)
# Environment: LOCKSTEP_BIN (the binary; default target/release/lockstep), LOCKSTEP_BENCH_DIR
# (where the bundle and store live; default target/diagnose-speed, reused when present).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
BIN=${LOCKSTEP_BIN:-target/release/lockstep}
[ -x "$BIN" ] || cargo build --release --bin lockstep
DIR=${LOCKSTEP_BENCH_DIR:-target/diagnose-speed}
if [ ! -d "$DIR/db" ]; then
  rm -rf "$DIR"; mkdir -p "$DIR"
  "$BIN" simulate --scenario ib-link-errors --nodes 32 --minutes 30 --seed 1 --out "$DIR/bundle"
  "$BIN" import --data-dir "$DIR/db" "$DIR/bundle"
fi
echo "run,elapsed_ms,wall_ms,series,samples,bottleneck,top_suspect"
for i in $(seq 1 "$RUNS"); do
  start=$(date +%s%N)
  "$BIN" diagnose --data-dir "$DIR/db" --job llm-70b --format json > "$DIR/diag.json"
  end=$(date +%s%N)
  python3 - "$DIR/diag.json" "$i" $(( (end - start) / 1000000 )) <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
top = d["suspects"][0]["entity"] if d["suspects"] else None
print(f'{sys.argv[2]},{d["elapsed_ms"]},{sys.argv[3]},{d["series"]},{d["samples"]},{d["bottleneck"]},{top}')
PY
done
