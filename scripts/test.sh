#!/usr/bin/env bash
# Runs Lockstep's whole test suite on a fresh machine: installs what the cross-checks need
# (Python packages, Debian packages, the rustfmt and clippy components), checks formatting and
# lints (any clippy or rustdoc warning fails), then runs every Rust test.
set -euo pipefail
cd "$(dirname "$0")/.."

# --- setup (idempotent; skipped when everything is present) ---------------------------------
PY_PACKAGES="duckdb pyarrow pandas numpy scipy ruptures opentelemetry-sdk opentelemetry-exporter-otlp-proto-grpc opentelemetry-exporter-otlp-proto-http psycopg[binary] psycopg2-binary sqlalchemy adbc-driver-flightsql moto[server]"
if ! python3 -c "import duckdb, pyarrow, pandas, numpy, scipy, ruptures, opentelemetry.sdk, opentelemetry.exporter.otlp.proto.grpc, opentelemetry.exporter.otlp.proto.http, psycopg, psycopg2, sqlalchemy, adbc_driver_flightsql.dbapi, moto.server, boto3" 2>/dev/null; then
  echo "== installing Python packages: $PY_PACKAGES"
  python3 -m pip install --quiet --disable-pip-version-check $PY_PACKAGES
fi
# Headless Chromium renders the diagnosis HTML report in tests/cli/diagnose.rs; a real
# node_exporter is scraped and imported in tests/cli/prom.rs; a real Prometheus remote-writes
# into `lockstep serve` in tests/cli/remote_write.rs; psql queries its PostgreSQL listener in
# tests/cli/pg.rs (ADBC's Flight SQL driver its Flight SQL listener in tests/cli/flight.rs).
# moto (PyPI, server mode) is the S3-compatible server of tests/cli/objstore.rs. PgJDBC (with
# a JDK for Java's source launcher) reads the PostgreSQL listener in tests/cli/pg_jdbc.rs.
DEB_PACKAGES=""
command -v chromium >/dev/null 2>&1 || DEB_PACKAGES="$DEB_PACKAGES chromium"
command -v prometheus-node-exporter >/dev/null 2>&1 || DEB_PACKAGES="$DEB_PACKAGES prometheus-node-exporter"
command -v prometheus >/dev/null 2>&1 || DEB_PACKAGES="$DEB_PACKAGES prometheus"
command -v psql >/dev/null 2>&1 || DEB_PACKAGES="$DEB_PACKAGES postgresql-client"
command -v javac >/dev/null 2>&1 || DEB_PACKAGES="$DEB_PACKAGES default-jdk-headless"
[ -f /usr/share/java/postgresql.jar ] || DEB_PACKAGES="$DEB_PACKAGES libpostgresql-jdbc-java"
if [ -n "$DEB_PACKAGES" ]; then
  echo "== installing Debian packages:$DEB_PACKAGES"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $DEB_PACKAGES >/dev/null
fi
export LOCKSTEP_REQUIRE_CHROMIUM=1 LOCKSTEP_REQUIRE_NODE_EXPORTER=1 LOCKSTEP_REQUIRE_PROMETHEUS=1
export LOCKSTEP_REQUIRE_PSQL=1 LOCKSTEP_REQUIRE_JDBC=1 LOCKSTEP_REQUIRE_PSYCOPG=1 LOCKSTEP_REQUIRE_SQLALCHEMY=1 LOCKSTEP_REQUIRE_ADBC=1 LOCKSTEP_REQUIRE_MOTO=1
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  echo "== installing rustup components: rustfmt clippy"
  rustup component add rustfmt clippy
fi

# --- gates: formatting (rustfmt.toml), lints (workspace lints in Cargo.toml), rustdoc ---------
echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy --all-targets -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo doc -D warnings (broken and private intra-doc links)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
if ! command -v cargo-nextest >/dev/null 2>&1 && ! cargo nextest --version >/dev/null 2>&1; then
  echo "== cargo-nextest missing; using cargo test"
  exec cargo test --workspace --no-fail-fast
fi

# --- tests ---------------------------------------------------------------------------------
echo "== tests"
cargo nextest run --workspace --no-fail-fast --cargo-quiet
