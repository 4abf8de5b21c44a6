//! Python data tools over the PostgreSQL listener: pandas through SQLAlchemy's two PostgreSQL
//! dialects, as a notebook reads a job's timeline.

use std::process::Command;

use super::ok;
use super::pg::{Serve, have, simulated_store};

fn have_sqlalchemy() -> bool {
    let probe = "import sqlalchemy, pandas, psycopg, psycopg2";
    have("SQLAlchemy", Command::new("python3").args(["-c", probe]), "LOCKSTEP_REQUIRE_SQLALCHEMY")
}

/// pandas.read_sql through SQLAlchemy's two PostgreSQL dialects (psycopg and psycopg2), as a
/// notebook reads a job's timeline: one JSON line of records per dialect, or the error.
const PANDAS_SQLALCHEMY: &str = r#"
import json, sys, pandas, sqlalchemy
for driver in ["psycopg", "psycopg2"]:
    url = sys.argv[1].replace("postgresql://", "postgresql+" + driver + "://")
    try:
        engine = sqlalchemy.create_engine(url, use_native_hstore=False)
        frame = pandas.read_sql(sys.argv[2], engine)
        print(json.dumps(frame.to_dict("records")))
    except Exception as e:
        print(json.dumps("error: " + str(e).splitlines()[0]))
"#;
/// SQLAlchemy connects (QA pass 20: its dialects' probes on connecting, `pg_catalog.version()`,
/// `current_schema()` and `SHOW TRANSACTION ISOLATION LEVEL`, failed, so `pandas.read_sql`
/// with an engine did not work), and pandas reads what `lockstep sql` reads; hstore, which
/// needs `pg_catalog.pg_type`, is turned off as docs/network-sql.md says.
#[test]
fn pandas_reads_through_sqlalchemy() {
    if !have_sqlalchemy() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let db = simulated_store(tmp.path());
    let server = Serve::start(&db, "127.0.0.1:0", &[]).unwrap();
    let sql = "SELECT host, count(*) AS n, max(value) AS hi FROM samples GROUP BY host ORDER BY host";
    let out = Command::new("python3").args(["-c", PANDAS_SQLALCHEMY, &server.url(None), sql]).output().unwrap();
    assert!(out.status.success(), "python: {}", String::from_utf8_lossy(&out.stderr));
    let local = ok(&["sql", "--data-dir", db.to_str().unwrap(), "--format", "json", sql]);
    let local: Vec<serde_json::Value> = local.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let lines: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2);
    for records in lines {
        assert_eq!(records, serde_json::Value::Array(local.clone()), "pandas through SQLAlchemy");
    }
}
