#!/usr/bin/env bash
# Diagnosis accuracy: every simulator scenario x seeds (8 nodes, 8 minutes), every host's clock
# additionally skewed by up to +-5 s (on top of the simulator's +-2 s), diagnosed on the
# corrected timeline. Prints the table for docs/diagnosis.md and writes it to
# target/tmp/diagnose_accuracy.md. Seeds per scenario: LOCKSTEP_ACCURACY_SEEDS (default 5).
# Usage: benches/diagnose_accuracy.sh [--release]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test ${1:-} --workspace --test cli -- --ignored --exact diagnose::diagnose_accuracy --nocapture
