#!/usr/bin/env bash
# Diagnosis accuracy on data it was not tuned on: the independently written generator
# (sim/src/independent.rs: its own dynamics, label conventions, 1-15 s sampling, 4-12 nodes,
# clock offsets of up to +-3 s) x 7 situations x seeds. Tuning used seeds 0-9; the held-out
# report uses seeds 100.. (LOCKSTEP_EVAL_SEEDS=first:count, default 100:15). Prints AC@1 and
# AC@3 per situation with 95 % Wilson intervals and writes target/diagnose_independent.md.
# Usage: benches/diagnose_independent.sh [--release]
set -euo pipefail
cd "$(dirname "$0")/.."
export LOCKSTEP_EVAL_SEEDS=${LOCKSTEP_EVAL_SEEDS:-100:15}
cargo test ${1:-} -p lockstep --test cli -- --ignored --exact diagnose::independent::diagnose_independent_evaluation --nocapture
