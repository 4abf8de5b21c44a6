//! End-to-end tests of the `lockstep` binary: import, SQL, read-only refusal, a killed
//! writer process, and the crate dependency direction.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "cli/check.rs"]
mod check;
#[path = "cli/clock.rs"]
mod clock;
#[path = "cli/diagnose.rs"]
mod diagnose;
#[path = "cli/distributed.rs"]
mod distributed;
#[path = "cli/docs.rs"]
mod docs;
#[path = "cli/examples.rs"]
mod examples;
#[path = "cli/flight.rs"]
mod flight;
#[path = "cli/objstore.rs"]
mod objstore;
#[path = "cli/otlp_sdk.rs"]
mod otlp_sdk;
#[path = "cli/pg.rs"]
mod pg;
#[path = "cli/pg_jdbc.rs"]
mod pg_jdbc;
#[path = "cli/pg_sqlalchemy.rs"]
mod pg_sqlalchemy;
#[path = "cli/pg_wire.rs"]
mod pg_wire;
#[path = "cli/prom.rs"]
mod prom;
#[path = "cli/remote_write.rs"]
mod remote_write;
#[path = "cli/retention.rs"]
mod retention;
#[path = "cli/serve.rs"]
mod serve;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

const T: i64 = 1_767_225_600_000_000_000;

fn lockstep(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lockstep")).args(args).output().expect("run lockstep")
}

/// Runs lockstep with its stdout closed before it writes (a reader that went away, `| head`):
/// the output must end quietly, with success and no panic.
fn ok_with_closed_stdout(args: &[&str]) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run lockstep");
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !stderr.contains("panicked"), "lockstep {args:?}: {:?}: {stderr}", out.status);
}

fn ok(args: &[&str]) -> String {
    let out = lockstep(args);
    assert!(out.status.success(), "lockstep {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn make_bundle(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let mut csv = String::from("time,host,metric,value,gpu,job\n");
    for i in 0..600i64 {
        for gpu in 0..4 {
            let util = if i >= 300 && gpu == 2 { 40.0 } else { 95.0 };
            csv.push_str(&format!("{},node-01,DCGM_FI_DEV_GPU_UTIL,{util},{gpu},\n", T + i * 1_000_000_000 + gpu));
        }
        csv.push_str(&format!(
            "{},node-01,train_step_duration_seconds,{},,llm\n",
            T + i * 1_000_000_000,
            1.0 + (i / 300) as f64
        ));
    }
    std::fs::write(dir.join("samples.csv"), csv).unwrap();
}

#[test]
fn import_then_query() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    make_bundle(&bundle);
    let db = tmp.path().join("db");
    let db = db.to_str().unwrap();
    let out = ok(&["import", "--data-dir", db, bundle.to_str().unwrap()]);
    assert!(out.contains("imported 3000 samples of 5 series"), "{out}");
    let csv = |sql: &str| ok(&["sql", "--data-dir", db, "--format", "csv", sql]);

    let out = csv(
        "SELECT gpu, count(*) AS n, avg(value) AS mean FROM samples WHERE metric = 'DCGM_FI_DEV_GPU_UTIL' AND time >= '2026-01-01T00:05:00Z' GROUP BY gpu ORDER BY gpu",
    );
    assert_eq!(out, "gpu,n,mean\n0,300,95.0\n1,300,95.0\n2,300,40.0\n3,300,95.0\n");

    let out = ok(&[
        "sql",
        "--data-dir",
        db,
        "--format",
        "json",
        "SELECT job, max(value) AS worst FROM samples WHERE metric = 'train_step_duration_seconds' GROUP BY job",
    ]);
    assert_eq!(out.trim(), r#"{"job":"llm","worst":2.0}"#);

    let out = ok(&["sql", "--data-dir", db, "SELECT count(*) AS n FROM samples WHERE host IN ('node-01', 'x')"]);
    assert!(out.contains("| 3000 |"), "{out}");

    // Nested results (structs and lists, as `onset` and `change_points` return) are JSON text
    // in CSV, which has no nested fields (it once failed after printing the header).
    // An empty result still has its header (it printed nothing at all).
    assert_eq!(csv("SELECT metric, value FROM samples WHERE value < 0"), "metric,value\n");
    let out = csv("SELECT named_struct('a', 1, 'b', 'x') AS s, make_array(1, 2) AS l, CAST(NULL AS INT) AS n");
    assert_eq!(out, "s,l,n\n\"{\"\"a\"\":1,\"\"b\"\":\"\"x\"\"}\",\"[1,2]\",\n");
    let out = csv(
        "SELECT gpu, onset(time, value) AS o FROM samples WHERE metric = 'DCGM_FI_DEV_GPU_UTIL' GROUP BY gpu ORDER BY gpu",
    );
    let rows: Vec<&str> = out.lines().collect();
    assert_eq!(rows.len(), 5, "{out}");
    assert!(rows[3].starts_with("2,\"{") && rows[3].contains("\"\"time\"\""), "{out}");

    // `lockstep import … | head`: the import finishes, its summary ends quietly.
    let other = tmp.path().join("db2");
    let other = other.to_str().unwrap();
    ok_with_closed_stdout(&["import", "--data-dir", other, bundle.to_str().unwrap()]);
    assert!(ok(&["sql", "--data-dir", other, "SELECT count(*) FROM samples"]).contains("| 3000 "));
}

/// A bundle's `metrics.toml` extends the catalog used by SQL; switch series that carry only
/// a GUID are named after the topology's switch; a bad extension imports nothing.
#[test]
fn catalog_extension_and_switch_guids_name_series_in_sql() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    let mut csv = String::from("time,host,metric,value,guid,port\n");
    for i in 0..10i64 {
        csv.push_str(&format!("{},node-01,site_pdu_power_watts,{},,\n", T + i * 1_000_000_000, 500 + i));
        csv.push_str(&format!(
            "{},ufm-1,infiniband_switch_port_symbol_error_total,{i},0xABC,4\n",
            T + i * 1_000_000_000
        ));
    }
    std::fs::write(bundle.join("samples.csv"), csv).unwrap();
    std::fs::write(
        bundle.join("topology.json"),
        r#"{
      "nodes": [{"name": "node-01", "gpus": 8, "nics": [
        {"device": "mlx5_0", "port": 1, "fabric": "infiniband", "switch": "leaf-1", "switch_port": 1}]}],
      "switches": [
        {"name": "leaf-1", "tier": "leaf", "links": [{"port": 31, "peer": "spine-1", "peer_port": 4}]},
        {"name": "spine-1", "tier": "spine", "guid": "0xabc"}]
    }"#,
    )
    .unwrap();
    let toml = "[[metric]]\nfamily = \"site_pdu_power_watts\"\ndomain = \"compute\"\nkind = \"gauge\"\nunit = \"watts\"\nclass = \"power\"\nentity = \"node\"\nmeaning = \"rack PDU outlet power of the node\"\n";
    std::fs::write(bundle.join("metrics.toml"), toml.replace("kind = \"gauge\"", "kind = \"gauge\"\nscale = -1.0"))
        .unwrap();
    let db = tmp.path().join("db");
    let db = db.to_str().unwrap();
    let out = lockstep(&["import", "--data-dir", db, bundle.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("metrics.toml"), "{err}");
    assert!(ok(&["sql", "--data-dir", db, "--format", "csv", "SELECT count(*) AS n FROM samples"]).ends_with("n\n0\n"));

    std::fs::write(bundle.join("metrics.toml"), toml).unwrap();
    ok(&["import", "--data-dir", db, bundle.to_str().unwrap()]);
    let out = ok(&[
        "sql",
        "--data-dir",
        db,
        "--format",
        "csv",
        "SELECT metric, domain, entity, count(*) AS n FROM samples GROUP BY metric, domain, entity ORDER BY metric",
    ]);
    assert_eq!(
        out,
        "metric,domain,entity,n\n\
        infiniband_switch_port_symbol_error_total,network,spine-1:4,10\n\
        site_pdu_power_watts,compute,node-01,10\n"
    );
    let out = ok(&[
        "sql",
        "--data-dir",
        db,
        "--format",
        "csv",
        "SELECT domain, unit FROM metric_catalog WHERE family = 'site_pdu_power_watts'",
    ]);
    assert_eq!(out, "domain,unit\ncompute,watts\n");
}

#[test]
fn sql_is_read_only() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let db = db.to_str().unwrap();
    let csv = tmp.path().join("x.csv");
    std::fs::write(&csv, "a\n1\n").unwrap();
    let statements = [
        "CREATE TABLE t AS SELECT 1".to_string(),
        "INSERT INTO samples VALUES (1)".to_string(),
        "DROP TABLE samples".to_string(),
        format!("CREATE EXTERNAL TABLE x STORED AS CSV LOCATION '{}'", csv.display()),
        format!("COPY (SELECT 1) TO '{}/out.csv'", tmp.path().display()),
        format!("SELECT * FROM '{}'", csv.display()),
    ];
    for sql in &statements {
        let out = lockstep(&["sql", "--data-dir", db, sql]);
        assert!(!out.status.success(), "{sql} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error: "), "{sql}: {err}");
        assert!(!err.contains("panicked"), "{sql}: {err}");
    }
    let out = lockstep(&["sql", "--data-dir", db, "CREATE TABLE t AS SELECT 1"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("read-only"));
    assert!(!tmp.path().join("out.csv").exists(), "COPY must not write files");
    let out = lockstep(&["sql", "--data-dir", db, "SELEC nonsense"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("error: "));
}

/// `lockstep sql` under a memory limit: a join over `--memory-limit-mb` (or the environment
/// variable) fails with one line naming the limit and the way out; errors print once; csv
/// streams; `-` reads the query from stdin.
#[test]
fn sql_memory_limit_fails_clearly_and_stdin_query() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    make_bundle(&bundle);
    let db = tmp.path().join("db");
    let db = db.to_str().unwrap();
    ok(&["import", "--data-dir", db, bundle.to_str().unwrap()]);

    let join =
        "SELECT count(*) FROM generate_series(1, 300000) a JOIN generate_series(1, 300000) b ON a.value = b.value";
    let check = |out: std::process::Output| {
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error: query exceeded the memory limit of 1 MiB: "), "{err}");
        assert!(err.contains("raise it with --memory-limit-mb"), "{err}");
        assert_eq!((err.lines().count(), err.matches("exceeded").count()), (1, 1), "{err}");
    };
    check(lockstep(&["sql", "--data-dir", db, "--memory-limit-mb", "1", join]));
    let env = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["sql", "--data-dir", db, "--format", "csv", join])
        .env("LOCKSTEP_QUERY_MEMORY_LIMIT_MB", "1")
        .output()
        .unwrap();
    check(env);
    assert!(ok(&["sql", "--data-dir", db, "--memory-limit-mb", "64", "--format", "csv", join]).ends_with("\n300000\n"));

    let out = lockstep(&["sql", "--data-dir", db, "SELEC nonsense"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("found: SELEC").count(), 1, "{err}");

    let mut child = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["sql", "--data-dir", db, "--format", "csv", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"SELECT count(*) AS n FROM samples").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "n\n3000\n");
}

/// Scripts: several statements from the argument, `--file` and stdin, run in order; the first
/// error stops the script and names the statement and its line. The interactive shell (on a
/// pseudo-terminal from util-linux `script`) runs statements across lines, prints errors and
/// goes on, and keeps a history.
#[test]
fn sql_scripts_and_interactive_shell() {
    use std::io::{Read, Write};
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    make_bundle(&bundle);
    let db = tmp.path().join("db");
    let dbs = db.to_str().unwrap();
    ok(&["import", "--data-dir", dbs, bundle.to_str().unwrap()]);
    let out = ok(&["sql", "--data-dir", dbs, "--format", "csv", "SELECT 1 AS a; SELECT count(*) AS n FROM samples;"]);
    assert_eq!(out, "a\n1\nn\n3000\n");
    let file = tmp.path().join("q.sql");
    std::fs::write(&file, "-- the rows\nSELECT count(*) AS n FROM samples WHERE metric = 'x;y';\n/* done */").unwrap();
    assert_eq!(ok(&["sql", "--data-dir", dbs, "--format", "csv", "-f", file.to_str().unwrap()]), "n\n0\n");
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["sql", "--data-dir", dbs, "--format", "csv"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"SELECT 7 AS a;\n\nSELECT nope FROM samples;\nSELECT 8 AS b;").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "a\n7\n", "the third statement must not run");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("error: statement 2 (line 3): ") && err.contains("nope"), "{err}");

    // The shell needs a terminal: util-linux `script` gives it one.
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped the shell: util-linux script is missing");
        return;
    }
    let lockstep = env!("CARGO_BIN_EXE_lockstep");
    let mut child = Command::new("script")
        .args(["-qec", &format!("{lockstep} sql --data-dir {dbs}"), "/dev/null"])
        .env("HOME", tmp.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let seen = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    // Each line is typed once the shell asks for it (line editors drop typed-ahead input).
    let prompts = |s: &str| s.matches("lockstep> ").count() + s.matches("       -> ").count();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    for (i, line) in
        ["SELECT 41+1 AS x;", "SELECT count(*)", "AS n FROM samples;", "SELEC bad;", "\\q"].iter().enumerate()
    {
        while prompts(&seen.lock().unwrap()) <= i {
            assert!(std::time::Instant::now() < deadline, "no prompt {}: {}", i + 1, seen.lock().unwrap());
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
    }
    assert!(child.wait().unwrap().success());
    reader.join().unwrap();
    let seen = seen.lock().unwrap().clone();
    assert!(seen.contains("| 42 |"), "{seen}");
    assert!(seen.contains("| 3000 |"), "a statement over two lines: {seen}");
    assert!(seen.contains("error: SQL error"), "{seen}");
    let history = std::fs::read_to_string(tmp.path().join(".lockstep_history")).unwrap();
    assert!(history.contains("SELECT 41+1 AS x;") && history.contains("SELEC bad;"), "{history}");
}

/// The child process of [`killed_writer_loses_nothing_acknowledged`]: when started by that test
/// (this test binary re-executed with `LOCKSTEP_WRITE_LOOP_DIR` set), writes batches of 50
/// samples through the WAL and prints `acked N` after each durable acknowledgement until
/// killed. Run normally, it does nothing.
#[test]
fn write_loop_child() {
    use std::io::Write;
    let Some(dir) = std::env::var_os("LOCKSTEP_WRITE_LOOP_DIR") else { return };
    let store = lockstep_engine::Store::open(Path::new(&dir), lockstep_engine::StoreConfig::default()).unwrap();
    let mut out = std::io::stdout().lock();
    for b in 0..1_000_000u64 {
        let mut batch = lockstep_engine::WriteBatch::default();
        for i in 0..50 {
            let n = b * 50 + i;
            batch.push(
                lockstep_engine::SeriesKey::new("crash_test", [("host", format!("h{}", n % 7))]),
                T + n as i64,
                n as f64,
            );
        }
        assert!(store.write(&batch).unwrap().rejected.is_empty());
        writeln!(out, "acked {}", (b + 1) * 50).unwrap();
        out.flush().unwrap();
    }
}

/// Failing commands print one `error:` line whose ": "-separated parts do not repeat, for
/// errors from SQL planning and execution, a corrupt store and a missing file.
#[test]
fn errors_print_once_without_repetition() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    make_bundle(&bundle);
    let db = tmp.path().join("db");
    let db = db.to_str().unwrap();
    ok(&["import", "--data-dir", db, bundle.to_str().unwrap()]);
    let broken = tmp.path().join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("manifest.json"), "{ not json").unwrap();
    let broken = broken.to_str().unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["sql", "--data-dir", db, "SELEC nonsense"],
        vec!["sql", "--data-dir", db, "SELECT nope FROM samples"],
        vec!["sql", "--data-dir", db, "SELECT CAST('x' AS INT)"],
        vec!["sql", "--data-dir", db, "SELECT 1/0"],
        vec!["sql", "--data-dir", db, "SELECT * FROM nothere"],
        vec!["sql", "--data-dir", broken, "SELECT 1"],
        vec!["import", "--data-dir", db, "/nonexistent-bundle"],
    ];
    for args in cases {
        let out = lockstep(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().filter(|l| l.starts_with("error: ")).count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        let first = err.lines().next().unwrap_or_default();
        let parts: Vec<&str> = first.trim_start_matches("error: ").split(": ").filter(|p| p.len() >= 12).collect();
        for (i, part) in parts.iter().enumerate() {
            assert!(!parts[i + 1..].contains(part), "{args:?}: {part:?} repeats in {err}");
        }
    }
}

/// A user's Parquet file whose corrupt bytes make parquet-rs panic: `lockstep import` refuses
/// it with one `error:` line naming the file and imports nothing. The panic is caught and
/// becomes that error; its message and backtrace are not printed to stderr as well.
#[test]
fn parquet_file_that_panics_the_reader_is_one_error_line() {
    use arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use lockstep_engine::store::{Store, StoreConfig};
    use lockstep_ingest::import::{ImportOptions, import_file};
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("time", DataType::Int64, false),
        Field::new("host", DataType::Utf8, false),
        Field::new("metric", DataType::Utf8, false),
        Field::new("value", DataType::Float64, false),
    ]));
    let rows = 600i64;
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(Int64Array::from_iter_values((0..rows).map(|i| T + i * 1_000_000_000))),
            Arc::new(StringArray::from_iter_values((0..rows).map(|i| format!("node-{:02}", i % 3)))),
            Arc::new(StringArray::from_iter_values((0..rows).map(|_| "DCGM_FI_DEV_GPU_UTIL"))),
            Arc::new(Float64Array::from_iter_values((0..rows).map(|i| i as f64 * 0.25))),
        ],
    )
    .unwrap();
    let mut good = Vec::new();
    let mut writer = parquet::arrow::ArrowWriter::try_new(&mut good, schema, None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();

    // Find a flipped bit on which parquet-rs panics (footer bytes first: each probe is cheap),
    // and which the import's guard turns into its error.
    let flipped = tmp.path().join("flipped.parquet");
    let panics = |bytes: &[u8]| {
        std::fs::write(&flipped, bytes).unwrap();
        let file = std::fs::File::open(&flipped).unwrap();
        std::panic::catch_unwind(|| {
            let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)?.build()?;
            reader.collect::<Result<Vec<_>, _>>().map_err(parquet::errors::ParquetError::from)
        })
        .is_err()
    };
    let store = Store::open(tmp.path().join("probe"), StoreConfig::default()).unwrap();
    let probe = tmp.path().join("probe.parquet");
    let panicking = (0..good.len())
        .rev()
        .flat_map(|at| [0x01u8, 0x80].map(|bit| (at, bit)))
        .map(|(at, bit)| {
            let mut bytes = good.clone();
            bytes[at] ^= bit;
            bytes
        })
        .filter(|bytes| panics(bytes))
        .find(|bytes| {
            std::fs::write(&probe, bytes).unwrap();
            let outcome = import_file(&store, &probe, &ImportOptions::default(), &mut |_, _| {});
            outcome.is_err_and(|e| e.to_string().contains("failed on corrupt data"))
        })
        .expect("a bit flip on which parquet-rs panics");

    let bundle = tmp.path().join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    std::fs::write(bundle.join("samples.parquet"), panicking).unwrap();
    let db = tmp.path().join("db");
    let out = lockstep(&["import", "--data-dir", db.to_str().unwrap(), bundle.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: ") && err.contains("samples.parquet") && err.contains("failed on corrupt data"),
        "{err}"
    );
    // Where the caught panic happened is in the message: a panic in Lockstep's own code stays
    // traceable.
    assert!(err.contains(" (at ") && err.contains(".rs:"), "{err}");
}

/// A `file://` URL's directory is a store directory too: a writer on it directly (`--data-dir`)
/// and a writer through the URL (`--data-url file://…` with its own local directory) refuse
/// each other, whichever came first, naming the holder — they once both wrote and the second
/// one's manifest dropped the first one's acknowledged samples.
#[test]
fn a_file_url_and_its_directory_refuse_a_second_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    make_bundle(&bundle);
    let dir = tmp.path().join("store");
    let url = format!("file://{}", dir.display());
    let local = tmp.path().join("local");
    let (bundle, local) = (bundle.to_str().unwrap(), local.to_str().unwrap());
    // A writer on the directory first (this process): the import through the URL is refused.
    let store = lockstep_engine::Store::open(&dir, lockstep_engine::StoreConfig::default()).unwrap();
    let out = lockstep(&["import", "--data-dir", local, "--data-url", &url, bundle]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("is locked by another writer"), "{err}");
    drop(store);
    // A writer through the URL first (a server): an import into the directory is refused.
    let mut serve = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["serve", "--data-dir", local, "--data-url", &url, "--listen", "127.0.0.1:0", "--insecure"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(serve.stdout.take().unwrap()).lines();
    assert!(lines.any(|l| l.unwrap().starts_with("listening on")), "serve did not start");
    let out = lockstep(&["import", "--data-dir", dir.to_str().unwrap(), bundle]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("is locked by another writer") && err.contains("serve"), "{err}");
    serve.kill().unwrap();
    serve.wait().unwrap();
    // Once the server is gone, the directory is writable again.
    let out = ok(&["import", "--data-dir", dir.to_str().unwrap(), bundle]);
    assert!(out.contains("imported 3000 samples"), "{out}");
}

/// A writer given the URL of a dataset root (node stores under it) is refused, as one given
/// the root's directory is (QA pass 22: through `--data-url` it created a store at the root,
/// and every reader of the dataset saw only that store from then on); the nodes' URLs stay
/// writable.
#[test]
fn a_writer_at_a_dataset_roots_url_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    make_bundle(&bundle);
    let root = tmp.path().join("dataset");
    let url = format!("file://{}", root.display());
    let (bundle, local) = (bundle.to_str().unwrap(), |n: &str| tmp.path().join(n).to_str().unwrap().to_string());
    ok(&["import", "--data-dir", &local("w0"), "--data-url", &format!("{url}/node-0"), bundle]);
    let out = lockstep(&["import", "--data-dir", &local("w1"), "--data-url", &url, bundle]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("it is a dataset root: the stores node-0 are under it"), "{err}");
    assert!(!root.join("manifest.json").exists(), "nothing written at the root");
    let count =
        ok(&["sql", "--data-dir", &local("r"), "--data-url", &url, "--format", "csv", "SELECT count(*) FROM samples"]);
    assert_eq!(count.lines().nth(1), Some("3000"), "the dataset reads node-0: {count}");
    ok(&["import", "--data-dir", &local("w2"), "--data-url", &format!("{url}/node-1"), bundle]);
}

/// Kills a real writer process (SIGKILL) while it writes; every sample it acknowledged
/// must be in the store after reopening.
#[test]
fn killed_writer_loses_nothing_acknowledged() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "write_loop_child", "--nocapture", "--test-threads", "1"])
        .env("LOCKSTEP_WRITE_LOOP_DIR", &db)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut last_acked = 0u64;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        // libtest's own lines ("running 1 test", …) come first.
        let Some(n) = line.strip_prefix("acked ") else { continue };
        last_acked = n.parse().unwrap();
        if last_acked >= 20_000 {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(last_acked >= 20_000);
    let store =
        lockstep_engine::Store::open(&db, lockstep_engine::StoreConfig { max_future_ns: None, ..Default::default() })
            .unwrap();
    let rows = store.scan_all(Default::default()).unwrap();
    let mut values: Vec<u64> = rows.value.iter().map(|v| *v as u64).collect();
    values.sort_unstable();
    assert!(values.len() as u64 >= last_acked, "{} rows < {last_acked} acknowledged", values.len());
    // Acknowledged samples are exactly 0..last_acked; anything beyond is whole batches.
    assert!(values.iter().take(last_acked as usize).copied().eq(0..last_acked), "acknowledged samples missing");
    assert_eq!(values.len() % 50, 0, "a batch was half-written");
}

/// The crate graph follows the design: engine depends on no workspace crate and not on
/// datafusion/tonic/clap; query and ingest only on engine (and proto for ingest).
#[test]
fn dependency_direction() {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let deps = |name: &str| -> Vec<String> {
        let pkg = meta["packages"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap();
        pkg["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"].is_null())
            .map(|d| d["name"].as_str().unwrap().to_string())
            .collect()
    };
    let workspace = |v: &[String]| -> Vec<String> { v.iter().filter(|d| d.starts_with("lockstep")).cloned().collect() };
    let engine = deps("lockstep-engine");
    assert!(workspace(&engine).is_empty(), "engine depends on {engine:?}");
    for banned in ["datafusion", "tonic", "clap", "tokio"] {
        assert!(!engine.iter().any(|d| d == banned), "engine must not depend on {banned}");
    }
    assert_eq!(workspace(&deps("lockstep-query")), vec!["lockstep-engine"]);
    let mut ingest = workspace(&deps("lockstep-ingest"));
    ingest.sort();
    assert_eq!(ingest, vec!["lockstep-engine", "lockstep-proto"]);
    assert!(workspace(&deps("lockstep-proto")).is_empty());
    // The simulator writes bundles; it knows the engine's types and nothing of ingestion.
    assert_eq!(workspace(&deps("lockstep-sim")), vec!["lockstep-engine"]);
}

/// The main job end to end on a small cluster: simulate, import (with topology and jobs),
/// query the evidence; the faulty port's errors top the fabric table.
#[test]
fn demo_runs_and_shows_the_faulty_port() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let out = ok(&["demo", "--dir", dir.to_str().unwrap(), "--nodes", "4", "--minutes", "5", "--seed", "3"]);
    let truth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("bundle/truth.json")).unwrap()).unwrap();
    let fault = truth["fault_entity"].as_str().unwrap();
    let fabric = out.split("== 3. fabric error counters").nth(1).unwrap();
    let first_row = fabric.lines().find(|l| l.starts_with("| ") && !l.contains("entity")).unwrap();
    assert!(first_row.contains(fault), "top fabric row {first_row:?} should be the injected {fault}");
    assert!(out.contains("| llm-70b |"), "{out}");
}

/// `demo --dir` never deletes what it did not create, and validates its arguments before it
/// touches the disk; a directory an earlier demo made is replaced.
#[test]
fn demo_refuses_foreign_directories_and_bad_arguments() {
    let tmp = tempfile::tempdir().unwrap();
    let foreign = tmp.path().join("mine");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("notes.txt"), "keep me").unwrap();
    let out = lockstep(&["demo", "--dir", foreign.to_str().unwrap(), "--nodes", "4", "--minutes", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("was not created by `lockstep demo`"), "{err}");
    assert_eq!(std::fs::read_to_string(foreign.join("notes.txt")).unwrap(), "keep me");
    let out = lockstep(&["demo", "--dir", foreign.to_str().unwrap(), "--scenario", "typo"]);
    assert!(!out.status.success());
    assert!(foreign.join("notes.txt").exists(), "a bad --scenario must not touch the directory");
    let fresh = tmp.path().join("fresh");
    let out = lockstep(&["demo", "--dir", fresh.to_str().unwrap(), "--scenario", "typo"]);
    assert!(!out.status.success() && !fresh.exists(), "nothing created for a bad --scenario");
    let out = lockstep(&["demo", "--dir", fresh.to_str().unwrap(), "--nodes", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && !fresh.exists() && err.contains("nodes must be between 4"), "{err}");
    // An earlier demo's store that a writer has open (`lockstep serve --data-dir DIR/db`) is
    // not replaced under it: the demo stops, naming the holder; once it is closed, it runs.
    let earlier = tmp.path().join("earlier");
    std::fs::create_dir_all(&earlier).unwrap();
    std::fs::write(earlier.join(".lockstep-demo"), "").unwrap();
    let store = lockstep_engine::Store::open(earlier.join("db"), lockstep_engine::StoreConfig::default()).unwrap();
    let args = ["demo", "--dir", earlier.to_str().unwrap(), "--nodes", "4", "--minutes", "1"];
    let out = lockstep(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("a process has open") && err.contains("is locked"), "{err}");
    assert!(earlier.join("db/manifest.json").exists(), "the open store was removed");
    drop(store);
    ok(&args);
}

/// The issue's scale: a simulated 32-node (256-GPU) job of 30 minutes imports and is
/// queryable, series by series and by topology.
#[test]
fn simulated_256_gpu_job_of_30_minutes_imports_and_is_queryable() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    let out = ok(&[
        "simulate",
        "--scenario",
        "ib-link-errors",
        "--nodes",
        "32",
        "--minutes",
        "30",
        "--seed",
        "1",
        "--out",
        bundle.to_str().unwrap(),
    ]);
    let number = |text: &str, before: &str| -> u64 {
        let head = text.split(before).next().unwrap();
        head.rsplit(|c: char| !c.is_ascii_digit()).find(|w| !w.is_empty()).unwrap().parse().unwrap()
    };
    let (series, samples) = (number(&out, " series"), number(&out, " samples"));
    assert!(series > 8_000 && samples > 14_000_000, "{out}");
    // A second bundle into the same directory is refused, leaving the first whole (QA pass
    // 20: it was mixed into it, or replaced a demo's bundle without a word).
    let again = lockstep(&["simulate", "--nodes", "4", "--minutes", "1", "--out", bundle.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success() && err.contains("is not empty") && err.contains("new or empty directory"), "{err}");
    let db = tmp.path().join("db");
    let db = db.to_str().unwrap();
    let out = ok(&["import", "--data-dir", db, bundle.to_str().unwrap()]);
    assert!(out.contains(&format!("imported {samples} samples of {series} series")), "{out}");
    let csv = |sql: &str| ok(&["sql", "--data-dir", db, "--format", "csv", sql]);
    assert_eq!(
        csv("SELECT count(*) AS n, count(DISTINCT series_id) AS s FROM samples"),
        format!("n,s\n{samples},{series}\n")
    );
    assert_eq!(csv("SELECT count(*) AS gpus FROM job_entities('llm-70b') WHERE entity_kind = 'gpu'"), "gpus\n256\n");
    // Every domain has series, and every series resolves to an entity.
    let domains = csv("SELECT domain, count(DISTINCT series_id) AS s FROM samples GROUP BY domain ORDER BY domain");
    for d in ["collective", "compute", "data_loading", "network", "storage", "training"] {
        assert!(domains.contains(&format!("\n{d},")), "{d} missing: {domains}");
    }
    assert_eq!(csv("SELECT count(*) AS n FROM samples WHERE entity IS NULL"), "n\n0\n");
}
