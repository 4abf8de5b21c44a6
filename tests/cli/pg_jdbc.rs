//! PgJDBC, the driver of Java tools (DBeaver, Metabase, Tableau, Spark) over the PostgreSQL
//! listener: floats in text (`Infinity`: the driver's getDouble refused pgwire's `inf`), a
//! parameter set with `setString` and cast to an array (`?::text[]`: a list of one string), past
//! the driver's prepare threshold (server-prepared statements and binary results), `setArray`,
//! `setDate` and `setTime` (sent with a zone), timestamps, a cursor read with a fetch size, and a
//! syntax error's SQLSTATE.

use std::path::PathBuf;
use std::process::Command;

use super::ok;
use super::pg::{Serve, have, simulated_store};

const PROGRAM: &str = include_str!("jdbc/LockstepJdbc.java");

/// The PgJDBC jar: `LOCKSTEP_JDBC_JAR`, else Debian's `libpostgresql-jdbc-java`.
fn jdbc_jar() -> PathBuf {
    std::env::var_os("LOCKSTEP_JDBC_JAR").map_or_else(|| PathBuf::from("/usr/share/java/postgresql.jar"), PathBuf::from)
}

fn have_jdbc() -> bool {
    // The source launcher (`java File.java`) needs a JDK's compiler, and the jar must be there.
    let mut probe = Command::new("javac");
    probe.arg("-version");
    have("Java with PgJDBC", &mut probe, "LOCKSTEP_REQUIRE_JDBC")
        && (jdbc_jar().is_file() || {
            assert!(std::env::var_os("LOCKSTEP_REQUIRE_JDBC").is_none(), "PgJDBC jar missing: {:?}", jdbc_jar());
            eprintln!("skipped: the PgJDBC jar is not installed");
            false
        })
}

#[test]
fn jdbc_reads_floats_arrays_and_timestamps() {
    if !have_jdbc() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let db = simulated_store(tmp.path());
    let server = Serve::start(&db, "127.0.0.1:0", &[]).unwrap();
    let source = tmp.path().join("LockstepJdbc.java");
    std::fs::write(&source, PROGRAM).unwrap();
    let url = format!("jdbc:postgresql://127.0.0.1:{}/lockstep", server.port());
    let out = Command::new("java").arg("-cp").arg(jdbc_jar()).arg(&source).arg(&url).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "java: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    let line = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in:\n{stdout}"))
            .to_string()
    };
    assert_eq!(line("specials"), "Infinity,-Infinity,NaN,-0.0,1.0E20");
    let db = db.to_str().unwrap();
    let count = ok(&[
        "sql",
        "--data-dir",
        db,
        "--format",
        "csv",
        "SELECT count(*) FROM samples WHERE host IN ('node-01', 'node-02')",
    ]);
    let count = count.lines().nth(1).unwrap().to_string();
    assert_ne!(count, "0");
    assert_eq!(line("setString_any"), [count.as_str(); 7].join(","), "text, then binary after the threshold");
    assert_eq!(line("setArray_any"), count);
    let first = ok(&[
        "sql",
        "--data-dir",
        db,
        "--format",
        "csv",
        "SELECT CAST(time AS BIGINT) AS ns, value FROM samples WHERE metric = 'train_step_duration_seconds' \
         ORDER BY time, host LIMIT 2",
    ]);
    // Microseconds (the protocol's unit, rounded down) and the double's bits.
    let expected: Vec<String> = first
        .lines()
        .skip(1)
        .map(|l| {
            let (ns, value) = l.split_once(',').unwrap();
            let (ns, value): (i64, f64) = (ns.parse().unwrap(), value.parse().unwrap());
            format!("{}={}", ns.div_euclid(1000), value.to_bits() as i64)
        })
        .collect();
    let timestamps = line("timestamps");
    let runs: Vec<&str> = timestamps.split(';').collect();
    assert_eq!(runs.len(), 7);
    for run in runs {
        assert_eq!(run, expected.join(","), "text and binary results agree with lockstep sql");
    }
    let scalar = |sql: &str| ok(&["sql", "--data-dir", db, "--format", "csv", sql]).lines().nth(1).unwrap().to_string();
    let day = scalar("SELECT count(*) FROM samples WHERE CAST(time AS DATE) = DATE '2026-03-02'");
    assert_ne!(day, "0");
    assert_eq!(line("setDate"), day);
    let all = scalar("SELECT count(*) FROM samples WHERE time >= TIMESTAMP '2026-03-02T00:00:00Z'");
    assert_eq!(line("setDate_timestamp"), all, "a date where the statement takes a timestamp");
    let later = scalar("SELECT count(*) FROM samples WHERE CAST(time AS TIME) >= TIME '09:01:00'");
    assert_ne!(later, "0");
    assert_eq!(line("setTime"), later);
    assert_eq!(line("fetched"), "1000", "a cursor read in batches of 100");
    assert_eq!(line("error"), "42601");
    assert!(line("version").starts_with("16."), "{stdout}");
}
