//! Python data tools over the PostgreSQL listener: pandas through SQLAlchemy's two PostgreSQL
//! dialects, as a notebook reads a job's timeline, and psycopg2's parameter lists.

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

/// psycopg2 inlines a parameter list as `ARRAY['a','b']`, an empty one as `'{}'` — a literal
/// PostgreSQL types as the array `ANY` needs; each statement as `[sql, params]`, one JSON line
/// of rows (or the error) per statement.
const PSYCOPG2_LISTS: &str = r#"
import json, sys, psycopg2
conn = psycopg2.connect(sys.argv[1])
conn.autocommit = True
cur = conn.cursor()
for sql, params in json.loads(sys.argv[2]):
    try:
        cur.execute(sql, tuple(params))
        print(json.dumps(cur.fetchall()))
    except Exception as e:
        print(json.dumps("error: " + str(e).splitlines()[0]))
"#;

/// psycopg2's lists filter as psycopg's do (QA pass 21: the empty list, `ANY('{}')`, failed in
/// type coercion; `'{…}'::text[]` found nothing, the literal cast as a list of one string).
#[test]
fn psycopg2_lists_and_array_literals_filter() {
    if !have_sqlalchemy() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let db = simulated_store(tmp.path());
    let server = Serve::start(&db, "127.0.0.1:0", &[]).unwrap();
    let count = "SELECT count(*) FROM samples WHERE ";
    let statements = serde_json::json!([
        [format!("{count}host = ANY(%s)"), [[]]],
        [format!("{count}host <> ALL(%s)"), [[]]],
        [format!("{count}host = ANY(%s)"), [["node-01", "node-02"]]],
        [format!("{count}host = ANY('{{node-01,node-02}}'::text[])"), []],
        [format!("{count}host IN ('node-01', 'node-02')"), []],
        [format!("{count}true"), []],
    ]);
    let out = Command::new("python3")
        .args(["-c", PSYCOPG2_LISTS, &server.url(None), &statements.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "python: {}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let n = |i: usize| rows[i][0][0].as_i64().unwrap_or_else(|| panic!("statement {i}: {}", rows[i]));
    assert_eq!(n(0), 0, "an empty list matches nothing");
    assert_eq!(n(1), n(5), "nothing is in an empty list");
    assert!(n(4) > 0);
    assert_eq!((n(2), n(3)), (n(4), n(4)), "a list and an array literal filter as IN does");
}
