#!/usr/bin/env bash
# Runs Lockstep's whole test suite on a fresh machine: installs what the cross-checks need
# (Python packages, Debian packages), then runs every Rust test.
set -euo pipefail
cd "$(dirname "$0")/.."

# --- setup (idempotent; skipped when everything is present) ---------------------------------
PY_PACKAGES="duckdb pyarrow pandas numpy scipy ruptures opentelemetry-sdk opentelemetry-exporter-otlp-proto-grpc"
if ! python3 -c "import duckdb, pyarrow, pandas, numpy, scipy, ruptures, opentelemetry.sdk, opentelemetry.exporter.otlp.proto.grpc" 2>/dev/null; then
  echo "== installing Python packages: $PY_PACKAGES"
  python3 -m pip install --quiet --disable-pip-version-check $PY_PACKAGES
fi
# Headless Chromium renders the diagnosis HTML report in tests/cli/diagnose.rs.
if ! command -v chromium >/dev/null 2>&1; then
  echo "== installing Debian packages: chromium"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
export LOCKSTEP_REQUIRE_CHROMIUM=1
if ! command -v cargo-nextest >/dev/null 2>&1 && ! cargo nextest --version >/dev/null 2>&1; then
  echo "== cargo-nextest missing; using cargo test"
  exec cargo test --workspace --no-fail-fast
fi

# --- tests ---------------------------------------------------------------------------------
cargo nextest run --workspace --no-fail-fast --cargo-quiet
