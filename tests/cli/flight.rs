//! SQL over Arrow Flight SQL of `lockstep serve --flight-listen`, with a real client: ADBC's
//! Flight SQL driver (PyPI `adbc-driver-flightsql`) and `pyarrow.flight`, through
//! tests/flight_client.py. The store is the PostgreSQL tests' (a simulated job plus samples
//! written into the running server over gRPC); the values that come back equal `lockstep
//! sql`'s, `time` is a tz-aware timestamp, and authentication, read-only refusal, the memory
//! and time limits, malformed requests and TLS behave as documented in docs/network-sql.md.

use std::io::BufRead;
use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use super::ok;
use super::pg::{Serve, have, simulated_store, test_certificate, write_live_samples};

const READ_TOKEN: &str = "flight-read-token-0123456789";
const WRITE_TOKEN: &str = "flight-write-token-0123456789";

pub(super) fn have_adbc() -> bool {
    have(
        "adbc-driver-flightsql",
        Command::new("python3").args(["-c", "import adbc_driver_flightsql.dbapi, pyarrow.flight"]),
        "LOCKSTEP_REQUIRE_ADBC",
    )
}

/// Starts `serve --flight-listen` (and a PostgreSQL listener) on `db`; returns the server and
/// the Flight SQL address; `Err(stderr)` when it refuses.
fn start(db: &Path, flight_listen: &str, extra: &[&str]) -> Result<(Serve, String), String> {
    let mut args = vec!["--flight-listen", flight_listen];
    args.extend(extra);
    let mut server = Serve::start(db, "127.0.0.1:0", &args)?;
    let mut line = String::new();
    server.stdout.read_line(&mut line).unwrap();
    let addr = line.strip_prefix("flight sql on ").unwrap_or_else(|| panic!("no flight sql address: {line:?}"));
    let addr = addr.split_whitespace().next().unwrap().to_string();
    Ok((server, addr))
}

/// Runs tests/flight_client.py with `plan`; one JSON value per output line.
fn client(plan: &Value) -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/flight_client.py");
    let out = Command::new("python3").arg(script).arg(plan.to_string()).output().unwrap();
    assert!(out.status.success(), "flight_client.py failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// A query step's rows; panics with the step's error otherwise.
fn rows(result: &Value) -> &Vec<Value> {
    result["rows"].as_array().unwrap_or_else(|| panic!("not a result: {result}"))
}

/// The error message of a failed step.
fn error(result: &Value) -> String {
    result["message"].as_str().unwrap_or_else(|| panic!("expected an error: {result}")).to_string()
}

/// The rows of `lockstep sql --data-dir` for `sql` equal `result`'s (numbers to 1e-9).
fn assert_same_rows(db: &str, sql: &str, result: &Value) {
    let local = ok(&["sql", "--data-dir", db, "--format", "json", sql]);
    let local: Vec<Value> = local.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let remote = rows(result);
    let columns: Vec<&str> = result["columns"].as_array().unwrap().iter().map(|c| c[0].as_str().unwrap()).collect();
    assert_eq!(local.len(), remote.len(), "{sql}: {result}");
    assert!(!local.is_empty(), "{sql}: no rows");
    for (l, r) in local.iter().zip(remote) {
        for (name, cell) in columns.iter().zip(r.as_array().unwrap()) {
            let same = match (l[name].as_f64(), cell.as_f64()) {
                (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * a.abs().max(1.0),
                _ => &l[name] == cell,
            };
            assert!(same, "{sql}: column {name}: lockstep sql {} vs flight {cell}", l[name]);
        }
    }
}

/// ADBC on loopback without tokens reads what `lockstep sql` reads (the live samples
/// included); `time` is `timestamp[ns, tz=UTC]`; the catalog lists `samples` and the domain
/// tables; a prepared statement binds parameters; DDL and DML are refused; malformed requests
/// fail with a status and the server goes on.
#[test]
fn adbc_reads_what_lockstep_sql_reads() {
    if !have_adbc() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let db = simulated_store(tmp.path());
    let (server, addr) = start(&db, "127.0.0.1:0", &[]).unwrap();
    write_live_samples(&server, None);
    let db = db.to_str().unwrap();
    let uri = format!("grpc://{addr}");

    let compared = [
        "SELECT count(*) AS n FROM samples",
        "SELECT metric, count(*) AS n, min(value) AS lo, max(value) AS hi, sum(value) AS total \
         FROM samples GROUP BY metric ORDER BY metric",
        "SELECT host, avg(value) AS mean FROM samples WHERE metric = 'train_step_duration_seconds' \
         GROUP BY host ORDER BY host",
    ];
    let mut steps: Vec<Value> = compared.iter().map(|sql| json!({"sql": sql})).collect();
    steps.extend([
        json!({"sql": "SELECT time, host, value FROM samples WHERE metric = 'pg_probe' ORDER BY time"}),
        json!({"sql": "CREATE TABLE t (x INT)"}),
        json!({"sql": "INSERT INTO samples SELECT * FROM samples LIMIT 1"}),
        json!({"sql": "SELEC 1"}),
        json!({"objects": true}),
        json!({"sql": "SELECT count(*) AS n, sum(value) AS total FROM samples WHERE metric = $1 AND value >= $2",
               "params": ["pg_probe", 3]}),
        // Parameters in the select list: the schema announced is the bound statement's (ADBC
        // refused the stream as "inconsistent schema").
        json!({"sql": "SELECT $1 + 1 AS next, $2 AS tag, value * $3 AS twice FROM samples \
                       WHERE metric = 'pg_probe' ORDER BY time LIMIT 1",
               "params": [41, "x", 2.0]}),
    ]);
    let results = client(&json!({"uri": uri, "steps": steps}));
    assert_eq!(results.len(), steps.len(), "{results:?}");
    for (sql, result) in compared.iter().zip(&results) {
        assert_same_rows(db, sql, result);
    }
    let probe = &results[3];
    assert_eq!(probe["columns"][0], json!(["time", "timestamp[ns, tz=UTC]"]), "{probe}");
    assert_eq!(rows(probe).len(), 5, "{probe}");
    assert_eq!(rows(probe)[0], json!([{"ts": "2026-03-02T09:01:00+00:00", "tz": 0.0}, "live", 1.0]));
    assert_eq!(rows(probe)[4][2], 5.0);
    for refused in &results[4..6] {
        assert!(error(refused).contains("read-only"), "{refused}");
    }
    assert!(error(&results[6]).contains("SELEC"), "{}", results[6]);

    let objects = &results[7];
    let tables: Vec<&str> = objects["tables"].as_array().unwrap().iter().map(|t| t[2].as_str().unwrap()).collect();
    for table in ["samples", "clock_models", "jobs", "topology_nodes", "metric_catalog"] {
        assert!(tables.contains(&table), "{table} missing from {tables:?}");
    }
    assert_eq!(objects["samples"][0], json!(["time", "timestamp[ns, tz=UTC]"]), "{objects}");
    assert!(objects["samples"].as_array().unwrap().iter().any(|c| c == &json!(["value", "double"])), "{objects}");
    assert_eq!(objects["vendor"], "Lockstep");

    // Bound parameters: the probe's values 3, 4 and 5.
    assert_eq!(rows(&results[8])[0], json!([3, 12.0]), "{}", results[8]);
    assert_eq!(rows(&results[9])[0], json!([42, "x", 2.0]), "{}", results[9]);

    // Malformed requests: each fails with a status; the server still answers afterwards.
    let raw = &client(&json!({"uri": uri, "raw": true}))[0];
    for (name, outcome) in raw.as_object().unwrap() {
        assert!(outcome != "ok" && !outcome.as_str().unwrap().contains("nauthenticated"), "{name}: {outcome}");
    }
    assert!(raw["unknown_handle"].as_str().unwrap().contains("unknown prepared statement"), "{raw}");
    assert!(raw["bad_utf8_ticket"].as_str().unwrap().contains("UTF-8"), "{raw}");
    assert!(raw["update"].as_str().unwrap().contains("read-only"), "{raw}");
    let again = client(&json!({"uri": uri, "steps": [{"sql": compared[0]}]}));
    assert_same_rows(db, compared[0], &again[0]);
}

/// With a tokens file, a call needs a read token as a bearer header or as the password
/// (ADBC's username/password: the Flight handshake); wrong credentials and write-only tokens
/// are refused. A statement over the memory limit fails with a clear error while the same
/// connection and other clients go on; the time limit and `CancelFlightInfo` stop a slow
/// statement. TLS works.
#[test]
fn flight_auth_limits_and_tls() {
    if !have_adbc() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let db = simulated_store(tmp.path());
    let tokens = tmp.path().join("tokens");
    std::fs::write(&tokens, format!("read {READ_TOKEN}\nwrite {WRITE_TOKEN}\n")).unwrap();
    let tokens = tokens.to_str().unwrap();
    let limits = ["--token-file", tokens, "--query-memory-limit-mb", "1", "--query-timeout-secs", "4"];
    let (server, addr) = start(&db, "127.0.0.1:0", &limits).unwrap();
    write_live_samples(&server, Some(WRITE_TOKEN));
    let uri = format!("grpc://{addr}");
    let count = json!({"sql": "SELECT count(*) AS n FROM samples WHERE metric = 'pg_probe'"});

    for credentials in [
        json!({}),
        json!({"password": "wrong-password-0123456789"}),
        json!({"password": WRITE_TOKEN}),
        json!({"token": "wrong-token-0123456789"}),
    ] {
        let mut plan = json!({"uri": uri, "steps": [count]});
        plan.as_object_mut().unwrap().extend(credentials.as_object().unwrap().clone());
        let result = &client(&plan)[0];
        let message = result["connect_error"]["message"].as_str().unwrap_or_else(|| panic!("{plan}: {result}"));
        assert!(message.to_lowercase().contains("unauthenticated"), "{plan}: {message}");
    }
    for credentials in [json!({"password": READ_TOKEN, "username": "grafana"}), json!({"token": READ_TOKEN})] {
        let mut plan = json!({"uri": uri, "steps": [count]});
        plan.as_object_mut().unwrap().extend(credentials.as_object().unwrap().clone());
        assert_eq!(rows(&client(&plan)[0])[0], json!([5]), "{plan}");
    }

    // Over the 1 MiB limit, then the same connection goes on, then the 4 s time limit.
    let big =
        "SELECT count(*) FROM generate_series(1, 300000) a JOIN generate_series(1, 300000) b ON a.value = b.value";
    let slow = "SELECT count(*) FROM generate_series(1, 10000000000) a WHERE a.value % 7 = 3 AND sqrt(CAST(a.value AS DOUBLE)) > 1";
    let started = std::time::Instant::now();
    let results = client(&json!({"uri": uri, "password": READ_TOKEN,
        "steps": [{"sql": big}, count, {"sql": slow}, count]}));
    let message = error(&results[0]);
    assert!(message.contains("query exceeded the memory limit of 1 MiB"), "{message}");
    assert!(message.contains("--query-memory-limit-mb"), "{message}");
    assert_eq!(rows(&results[1])[0], json!([5]));
    let message = error(&results[2]);
    assert!(message.contains("statement timeout (4 s"), "{message}");
    assert_eq!(rows(&results[3])[0], json!([5]));
    assert!(started.elapsed().as_secs() < 30, "{:?}", started.elapsed());
    // CancelFlightInfo stops a running statement (CancelFlightInfoResult: status CANCELLED).
    let cancelled = &client(&json!({"uri": uri, "token": READ_TOKEN, "cancel": slow}))[0];
    assert_eq!(cancelled["cancel"], json!(["0801"]), "{cancelled}");
    assert!(cancelled["query"].as_str().unwrap().contains("user request"), "{cancelled}");
    assert!(cancelled["seconds"].as_f64().unwrap() < 3.5, "{cancelled}");
    // Malformed requests with a valid token fail with a status; without one, unauthenticated.
    let raw = &client(&json!({"uri": uri, "raw": true, "token": READ_TOKEN}))[0];
    assert!(raw["garbage_ticket"] != "ok" && !raw["garbage_ticket"].as_str().unwrap().contains("nauthenticated"));
    let raw = &client(&json!({"uri": uri, "raw": true}))[0];
    assert!(raw["garbage_ticket"].as_str().unwrap().contains("nauthenticated"), "{raw}");
    drop(server);

    // TLS with the same certificate flags as the other listeners.
    let (cert, key) = test_certificate(tmp.path());
    let (c, k) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let (_server, addr) =
        start(&db, "127.0.0.1:0", &["--token-file", tokens, "--tls-cert", c, "--tls-key", k]).unwrap();
    let sql = "SELECT count(*) AS n FROM samples WHERE metric = 'storage_read_latency_seconds'";
    let result = &client(&json!({"uri": format!("grpc+tls://{addr}"), "password": READ_TOKEN, "tls_root": c,
        "steps": [{"sql": sql}]}))[0];
    assert_eq!(rows(result)[0], json!([360]), "{result}");
}

/// Like the gRPC port: a public --flight-listen without tokens is refused unless --insecure.
#[test]
fn flight_listen_exposure_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let err = start(&db, "0.0.0.0:0", &[]).err().expect("a public listener without tokens must be refused");
    assert!(err.contains("refusing to listen on 0.0.0.0:0 without authentication"), "{err}");
    let (_server, addr) = start(&db, "0.0.0.0:0", &["--insecure"]).unwrap();
    assert!(addr.starts_with("0.0.0.0:"), "{addr}");
}

/// `--flight-max-connections 2` with `pyarrow.flight`: two clients holding their connections
/// are served, every call of a third fails with RESOURCE_EXHAUSTED naming the limit, and once
/// a client closes its connection a new one is served again.
#[test]
fn flight_connections_past_the_limit_are_refused_naming_it() {
    if !have_adbc() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (_server, addr) = start(&tmp.path().join("db"), "127.0.0.1:0", &["--flight-max-connections", "2"]).unwrap();
    let script = r#"
import json, sys, time
import pyarrow.flight as fl
addr = "grpc://" + sys.argv[1]

def call(client):
    try:
        list(client.list_actions())
        return "served"
    except Exception as e:  # RESOURCE_EXHAUSTED comes as pyarrow.lib.ArrowInvalid
        return str(e)

a, b, c = (fl.connect(addr) for _ in range(3))
out = [call(a), call(b), call(c), call(c)]
c.close()
a.close()
deadline = time.time() + 20
while True:
    d = fl.connect(addr)
    again = call(d)
    if again == "served" or time.time() > deadline:
        break
    d.close()
    time.sleep(0.2)
out += [again, call(b)]
print(json.dumps(out))
"#;
    let out = Command::new("python3").args(["-c", script, &addr]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let calls: Vec<String> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(calls[..2], ["served", "served"], "{calls:?}");
    for refused in &calls[2..4] {
        assert!(
            refused.contains("too many Flight SQL connections") && refused.contains("at most 2 open at once"),
            "{calls:?}"
        );
    }
    assert_eq!(calls[4..], ["served", "served"], "a slot is free again once a client closed: {calls:?}");
}
