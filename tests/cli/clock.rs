//! Clock correction end to end: bundles with skewed clocks imported, then read through SQL.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{Int64Type, TimestampNanosecondType};
use lockstep_engine::{Store, StoreConfig};
use lockstep_ingest::import::{ImportOptions, ImportReport, import_bundle};
use lockstep_query::QueryEngine;

use super::{T, ok};

const S: i64 = 1_000_000_000;

fn open(db: &Path) -> Arc<Store> {
    Arc::new(Store::open(db, StoreConfig { max_future_ns: None, ..Default::default() }).unwrap())
}

fn import(store: &Store, bundle: &Path) -> Result<ImportReport, lockstep_ingest::import::ImportError> {
    import_bundle(store, bundle, &ImportOptions::default(), &mut |_, _| {})
}

fn sql(store: &Arc<Store>, query: &str) -> Vec<RecordBatch> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async { QueryEngine::new(store.clone()).unwrap().collect(query).await.unwrap() })
}

fn int_column(batches: &[RecordBatch], name: &str) -> Vec<Option<i64>> {
    let mut out = Vec::new();
    for b in batches {
        let col = b.column_by_name(name).unwrap_or_else(|| panic!("no column {name}"));
        let col = arrow::compute::cast(col, &arrow::datatypes::DataType::Int64).unwrap();
        let col = col.as_primitive::<Int64Type>();
        out.extend((0..col.len()).map(|i| col.is_valid(i).then(|| col.value(i))));
    }
    out
}

/// Exchanges every 5 s for `host` whose clock reads `reference + offset`, with 20 µs one-way
/// delays, over `[from, to)` (reference time).
fn exchanges(csv: &mut String, host: &str, offset: i64, from: i64, to: i64) {
    let mut r = from;
    while r < to {
        let (t1, t2) = (r + offset, r + 20_000);
        let (t3, t4) = (t2 + 1_000, r + 41_000 + offset);
        csv.push_str(&format!("{host},{t1},{t2},{t3},{t4}\n"));
        r += 5 * S;
    }
}

/// A switch whose clock is 5 s ahead starts counting port errors at reference T+10 s; the
/// collective time on a node with a correct clock rises at reference T+12 s. Raw timestamps
/// put the effect (12 s) before the cause (15 s local); corrected, the cause comes first.
fn effect_before_cause_bundle(dir: &Path, with_sync: bool) {
    std::fs::create_dir_all(dir).unwrap();
    let mut samples = String::from("time,host,metric,value,switch,port,gpu\n");
    for i in 0..60 {
        let r = T + i * S;
        let errors = if i >= 10 { (i - 9) * 40 } else { 0 };
        samples
            .push_str(&format!("{},leaf-1,infiniband_switch_port_symbol_error_total,{errors},leaf-1,17,\n", r + 5 * S));
        let exec = if i >= 12 { 9000.0 } else { 3000.0 };
        samples.push_str(&format!("{r},node-01,nccl_collective_exec_time_microseconds,{exec},,,0\n"));
    }
    std::fs::write(dir.join("samples.csv"), samples).unwrap();
    if with_sync {
        let mut sync = String::from("host,t1,t2,t3,t4\n");
        exchanges(&mut sync, "leaf-1", 5 * S, T - 30 * S, T + 90 * S);
        exchanges(&mut sync, "node-01", 0, T - 30 * S, T + 90 * S);
        std::fs::write(dir.join("clock_sync.csv"), sync).unwrap();
    }
}

const ONSETS: &str = "SELECT \
    min(CASE WHEN metric = 'infiniband_switch_port_symbol_error_total' AND value > 0 THEN {col} END) AS cause, \
    min(CASE WHEN metric = 'nccl_collective_exec_time_microseconds' AND value > 5000 THEN {col} END) AS effect \
    FROM samples";

#[test]
fn skewed_bundle_is_ordered_by_corrected_time() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    effect_before_cause_bundle(&bundle, true);
    let store = open(&tmp.path().join("db"));
    let report = import(&store, &bundle).unwrap();
    assert_eq!(report.clock_exchanges, 48);
    assert_eq!(report.clock_version, 1);

    let raw = sql(&store, &ONSETS.replace("{col}", "local_time"));
    let (cause, effect) = (int_column(&raw, "cause")[0].unwrap(), int_column(&raw, "effect")[0].unwrap());
    assert!(effect < cause, "raw timestamps should put the effect first: {cause} vs {effect}");

    let fixed = sql(&store, &ONSETS.replace("{col}", "time"));
    let (cause, effect) = (int_column(&fixed, "cause")[0].unwrap(), int_column(&fixed, "effect")[0].unwrap());
    assert!((cause - (T + 10 * S)).abs() < 100_000, "cause at {cause}, want T+10 s");
    assert!((effect - (T + 12 * S)).abs() < 100_000, "effect at {effect}, want T+12 s");

    // Ordered beyond doubt given the uncertainties, and the uncertainty is honest (≤ the
    // 41 µs round trip) and small.
    let order = sql(
        &store,
        "WITH c AS (SELECT min(time) AS t FROM samples WHERE metric LIKE 'infiniband%' AND value > 0), \
              e AS (SELECT min(time) AS t FROM samples WHERE metric LIKE 'nccl%' AND value > 5000), \
              u AS (SELECT max(time_uncertainty) AS u FROM samples) \
         SELECT before(c.t, u.u, e.t, u.u) AS fwd, before(e.t, u.u, c.t, u.u) AS back, u.u AS u FROM c, e, u",
    );
    let b = &order[0];
    assert!(b.column_by_name("fwd").unwrap().as_boolean().value(0));
    assert!(!b.column_by_name("back").unwrap().as_boolean().value(0));
    let u = int_column(&order, "u")[0].unwrap();
    assert!(u > 0 && u <= 41_000, "uncertainty {u} ns");

    // Time filters on corrected time select by corrected time (and prune by mapped local time).
    let n = sql(
        &store,
        &format!(
            "SELECT count(*) AS n FROM samples WHERE host = 'leaf-1' AND time >= to_timestamp_nanos({}) AND time < to_timestamp_nanos({})",
            T + 10 * S,
            T + 20 * S
        ),
    );
    assert_eq!(int_column(&n, "n")[0], Some(10));
}

#[test]
fn later_clock_sync_changes_time_without_reimport() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    effect_before_cause_bundle(&bundle, false);
    let store = open(&tmp.path().join("db"));
    let report = import(&store, &bundle).unwrap();
    assert_eq!(report.clock_version, 0);
    let q =
        "SELECT min(time) AS t, min(local_time) AS l, max(time_uncertainty) AS u FROM samples WHERE host = 'leaf-1'";
    let before_sync = sql(&store, q);
    assert_eq!(int_column(&before_sync, "t"), int_column(&before_sync, "l"), "no model: raw time");
    assert_eq!(int_column(&before_sync, "u"), vec![None], "no model: unknown uncertainty");

    // A sync-only bundle arrives later.
    let sync_dir = tmp.path().join("sync");
    std::fs::create_dir_all(&sync_dir).unwrap();
    let mut sync = String::from("host,t1,t2,t3,t4\n");
    exchanges(&mut sync, "leaf-1", 5 * S, T - 30 * S, T + 90 * S);
    std::fs::write(sync_dir.join("clock_sync.csv"), &sync).unwrap();
    let report = import(&store, &sync_dir).unwrap();
    assert_eq!((report.samples, report.clock_version), (0, 1));
    let after = sql(&store, q);
    let (t, l) = (int_column(&after, "t")[0].unwrap(), int_column(&after, "l")[0].unwrap());
    assert!((l - t - 5 * S).abs() < 50_000, "corrected by the 5 s offset: {t} vs local {l}");

    // Re-importing the same exchanges adds nothing and keeps the version.
    let again = import(&store, &sync_dir).unwrap();
    assert_eq!(again.clock_version, 1);

    // More exchanges make version 2; a query pinned to version 1 reproduces the earlier answer.
    let more_dir = tmp.path().join("sync2");
    std::fs::create_dir_all(&more_dir).unwrap();
    let mut more = String::from("host,t1,t2,t3,t4\n");
    exchanges(&mut more, "leaf-1", 5 * S, T + 90 * S, T + 300 * S);
    std::fs::write(more_dir.join("clock_sync.csv"), &more).unwrap();
    assert_eq!(import(&store, &more_dir).unwrap().clock_version, 2);
    let pinned = sql(&store, &q.replace("FROM samples", "FROM samples_at_clock(1)"));
    assert_eq!(int_column(&pinned, "t"), int_column(&after, "t"));
    assert_eq!(int_column(&pinned, "u"), int_column(&after, "u"));

    // The old version stays reproducible, and the models are listed.
    let old = sql(&store, "SELECT min(time) AS t FROM samples_at_clock(0) WHERE host = 'leaf-1'");
    assert_eq!(int_column(&old, "t")[0], Some(l));
    let versions = sql(&store, "SELECT DISTINCT version FROM clock_models ORDER BY version");
    assert_eq!(int_column(&versions, "version"), vec![Some(1), Some(2)]);
    let models = sql(&store, "SELECT version, host, offset_start_ns, samples_used FROM clock_models WHERE version = 1");
    assert_eq!(int_column(&models, "version"), vec![Some(1)]);
    let off = int_column(&models, "offset_start_ns")[0].unwrap();
    assert!((off - 5 * S).abs() < 50_000, "offset {off}");
    assert!(int_column(&models, "samples_used")[0].unwrap() >= 20);

    // A version that does not exist is a clear error, from SQL and from the CLI.
    let db = tmp.path().join("db");
    drop(store);
    let out = super::lockstep(&["sql", "--data-dir", db.to_str().unwrap(), "SELECT * FROM samples_at_clock(7)"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("clock model version 7 does not exist"), "{err}");
    let out = ok(&[
        "sql",
        "--data-dir",
        db.to_str().unwrap(),
        "--clock-version",
        "0",
        "--format",
        "csv",
        "SELECT count(*) AS n FROM samples WHERE time_uncertainty IS NULL",
    ]);
    assert_eq!(out, "n\n120\n");
}

#[test]
fn bad_clock_sync_rows_import_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    effect_before_cause_bundle(&bundle, false);
    // Row 3 has t4 < t1.
    std::fs::write(
        bundle.join("clock_sync.csv"),
        format!(
            "host,t1,t2,t3,t4\nnode-01,{},{},{},{}\nnode-01,{},{},{},{}\nnode-01,{},{},{},{}\n",
            T,
            T + 10,
            T + 11,
            T + 20,
            T + S,
            T + S + 10,
            T + S + 11,
            T + S + 20,
            T + 2 * S,
            T + 2 * S + 10,
            T + 2 * S + 11,
            T + 2 * S - 5
        ),
    )
    .unwrap();
    let store = open(&tmp.path().join("db"));
    let e = import(&store, &bundle).unwrap_err().to_string();
    assert!(e.contains("clock_sync.csv: row 3: ") && e.contains("t4 < t1"), "{e}");
    let n = sql(&store, "SELECT count(*) AS n FROM samples");
    assert_eq!(int_column(&n, "n"), vec![Some(0)], "nothing imported");

    // A non-integer field names the column.
    std::fs::write(bundle.join("clock_sync.csv"), "host,t1,t2,t3,t4\nnode-01,1.5,2,3,4\n").unwrap();
    let e = import(&store, &bundle).unwrap_err().to_string();
    assert!(e.contains("row 1: t1 \"1.5\" is not an integer"), "{e}");

    // A single exchange is valid input: the host gets a model (a constant offset whose
    // uncertainty grows with the distance from the exchange).
    std::fs::write(
        bundle.join("clock_sync.csv"),
        format!("host,t1,t2,t3,t4\nnode-01,{},{},{},{}\n", T, T + 10_000, T + 11_000, T + 21_000),
    )
    .unwrap();
    let report = import(&store, &bundle).unwrap();
    assert_eq!(report.clock_version, 1);
    let u = sql(
        &store,
        "SELECT min(time_uncertainty) AS lo, max(time_uncertainty) AS hi FROM samples WHERE host = 'node-01'",
    );
    let (lo, hi) = (int_column(&u, "lo")[0].unwrap(), int_column(&u, "hi")[0].unwrap());
    assert!(lo >= 10_000 && hi > lo, "uncertainty grows away from the exchange: {lo}..{hi}");
}

/// A simulated cluster (clocks off by up to ±2 s, drifting up to ±50 ppm): after import, the
/// corrected time of every sample lies within its stated uncertainty of the true time.
#[test]
fn simulated_cluster_corrected_time_covers_truth() {
    use lockstep_sim::{Scenario, SimConfig, simulate};
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    let cfg = SimConfig { nodes: 4, minutes: 4, seed: 11, ..SimConfig::new(Scenario::Healthy) };
    let summary = simulate(&cfg, &bundle).unwrap();
    let store = open(&tmp.path().join("db"));
    let report = import(&store, &bundle).unwrap();
    assert!(report.clock_exchanges > 0 && report.clock_barriers > 0, "{report:?}");
    let truth = &summary.truth;
    let batches = sql(
        &store,
        "SELECT host, time, local_time, time_uncertainty FROM samples WHERE metric IN ('collective_end', 'node_load1', 'DCGM_FI_DEV_GPU_TEMP')",
    );
    let (mut n, mut covered, mut worst) = (0u64, 0u64, 0i64);
    for b in &batches {
        let host = arrow::compute::cast(b.column(0), &arrow::datatypes::DataType::Utf8).unwrap();
        let host = host.as_string::<i32>();
        let time = b.column(1).as_primitive::<TimestampNanosecondType>();
        let local = b.column(2).as_primitive::<TimestampNanosecondType>();
        let unc = b.column(3).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            let clock = truth.clocks[host.value(i)];
            // local = r + off + (r − start)·drift/1e9  ⇒  r = (local − off + start·k) / (1 + k)
            let k = clock.drift_ppb as f64 / 1e9;
            let x = (local.value(i) - clock.offset_ns - truth.start_ns) as f64;
            let true_ref = truth.start_ns + (x / (1.0 + k)).round() as i64;
            let err = (time.value(i) - true_ref).abs();
            worst = worst.max(err);
            n += 1;
            if unc.is_valid(i) && err <= unc.value(i) + 1 {
                covered += 1;
            }
        }
    }
    assert!(n > 1000, "{n} samples checked");
    assert!(covered as f64 >= 0.99 * n as f64, "coverage {covered}/{n}, worst error {worst} ns");
    assert!(worst < 1_000_000, "worst error {worst} ns (offsets were up to 2 s)");
}
