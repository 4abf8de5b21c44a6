//! The PostgreSQL wire protocol at the edges psql and psycopg (and a raw socket) reach: text
//! and binary results that agree, parameters that are not silently changed, and malformed
//! messages answered as protocol violations, never a panic (QA pass 18).

use std::io::Read;
use std::process::Command;

use super::pg::{Serve, have_psycopg};

/// Runs a psycopg `script` against `serve` on a new store: the script gets `conn` (a
/// connection in autocommit mode, `json` and `psycopg` imported) and prints one JSON value;
/// `None` when psycopg is not installed.
fn psycopg_on_a_new_server(script: &str) -> Option<serde_json::Value> {
    if !have_psycopg() {
        return None;
    }
    let tmp = tempfile::tempdir().unwrap();
    let server = Serve::start(&tmp.path().join("db"), "127.0.0.1:0", &[]).unwrap();
    let script = format!("import json, sys, psycopg\nconn = psycopg.connect(sys.argv[1], autocommit=True)\n{script}");
    let out = Command::new("python3").args(["-c", &script, &server.url(None)]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

/// psycopg reads the same values in text and in binary format where arrow-pg's encodings
/// disagreed: one-byte integers (binary sent them as int2's high byte), timestamps in a zone
/// whose offset has minutes (text dropped them: +05:30 became +05), times before 1970 (binary
/// rounded toward zero, text down), also inside lists.
#[test]
fn pg_text_and_binary_agree_on_tinyints_zones_and_old_times() {
    let script = r#"
query = """SELECT arrow_cast(5, 'Int8') AS a, arrow_cast(-1, 'Int8') AS b, [arrow_cast(1, 'Int8')] AS c,
  arrow_cast(1772442000000000000, 'Timestamp(Nanosecond, Some("+05:30"))') AS d,
  arrow_cast(1772442000000000000, 'Timestamp(Nanosecond, Some("Asia/Kathmandu"))') AS e,
  arrow_cast(-1500, 'Timestamp(Nanosecond, None)') AS f,
  arrow_cast(-86400001, 'Timestamp(Millisecond, Some("-03:30"))') AS g"""
out = {}
for binary in (False, True):
    row = conn.cursor(binary=binary).execute(query).fetchone()
    out["binary" if binary else "text"] = [v.isoformat() if hasattr(v, "isoformat") else v for v in row]
print(json.dumps(out))
"#;
    let Some(result) = psycopg_on_a_new_server(script) else { return };
    let want = serde_json::json!([
        5,
        -1,
        [1],
        "2026-03-02T09:00:00+00:00",
        "2026-03-02T09:00:00+00:00",
        "1969-12-31T23:59:59.999998+00:00",
        "1969-12-30T23:59:59.999000+00:00"
    ]);
    assert_eq!(result["text"], want, "{result}");
    assert_eq!(result["binary"], want, "{result}");
}

/// Malformed extended-query messages from a client past start-up (raw bytes over a socket)
/// end its connection with FATAL 08P01 instead of panicking the connection's task in
/// pgwire's decoder: a Parse with a negative parameter count, a Bind whose value runs past
/// the message or has length -5. An Execute with a row limit of -1 means no limit, as in
/// PostgreSQL; a Bind of more values than the statement has parameters is an error. A password
/// message after login is a protocol violation too, and a startup packet of a length PostgreSQL
/// refuses closes the connection at once (QA pass 18, F21). The server answers the next client
/// as before and never panicked.
#[test]
fn malformed_pg_messages_are_protocol_violations_not_panics() {
    if !have_psycopg() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Serve::start(&tmp.path().join("db"), "127.0.0.1:0", &[]).unwrap();
    let script = r#"
import json, socket, struct, sys, time, psycopg
port = int(sys.argv[1])
def msg(t, b): return t + struct.pack('!I', len(b) + 4) + b
def run(msgs):
    s = socket.create_connection(('127.0.0.1', port), timeout=10)
    body = struct.pack('!I', 196608) + b'user\0lockstep\0database\0lockstep\0\0'
    s.sendall(struct.pack('!I', len(body) + 4) + body)
    got = b''
    while not got.endswith(b'Z\0\0\0\5I'):
        got += s.recv(4096)
    # The server may close on a protocol violation before the rest is sent: what it answered
    # is still read.
    for m in msgs:
        try: s.sendall(m)
        except (BrokenPipeError, ConnectionResetError): break
    got = b''
    while True:
        try: chunk = s.recv(65536)
        except ConnectionResetError: break
        if not chunk: break
        got += chunk
        if got.endswith(b'Z\0\0\0\5I'): break
    s.close()
    return got.decode('latin-1')
out = {}
out["parse"] = run([msg(b'P', b'\0select $1\0' + struct.pack('!h', -5)), msg(b'S', b'')])
out["bind_past"] = run([msg(b'P', b'\0select $1::int\0\0\0'),
     msg(b'B', b'\0\0\0\0\0\x01' + struct.pack('!i', 1000000) + b'12\0\0'), msg(b'E', b'\0\0\0\0\0'), msg(b'S', b'')])
out["bind_negative"] = run([msg(b'P', b'\0select $1::int\0\0\0'),
     msg(b'B', b'\0\0\0\0\0\x01' + struct.pack('!i', -5) + b'\0\0'), msg(b'E', b'\0\0\0\0\0'), msg(b'S', b'')])
three = b''.join(struct.pack('!i', 1) + str(i).encode() for i in range(3))
out["bind_count"] = run([msg(b'P', b'\0select $1::int\0\0\0'),
     msg(b'B', b'\0\0\0\0\0\x03' + three + b'\0\0'), msg(b'E', b'\0\0\0\0\0'), msg(b'S', b'')])
out["execute_all"] = run([msg(b'P', b'\0select 41 + 1\0\0\0'), msg(b'B', b'\0\0\0\0\0\0\0\0'),
     msg(b'E', b'\0' + struct.pack('!i', -1)), msg(b'S', b'')])
# A password message after login: FATAL 08P01, and the connection ends (it was ignored and
# the client waited).
out["password"] = run([msg(b'p', b'secret\0')])
# Startup packets of a length PostgreSQL refuses (0, 2, 20000, an HTTP request): closed at
# once, unanswered (the server waited for more bytes until its 60 s start-up limit); one byte
# and then the end of the stream: closed at once too.
out["short_startup"] = []
for first in [struct.pack('!I', n) for n in (0, 2, 20000)] + [b'GET / HTTP/1.1\r\nHost: x\r\n\r\n', b'\0']:
    s = socket.create_connection(('127.0.0.1', port), timeout=20)
    s.sendall(first)
    if first == b'\0':
        s.shutdown(socket.SHUT_WR)
    started = time.time()
    try:
        reply = s.recv(4096)
    except socket.timeout:
        reply = b'(no close)'
    out["short_startup"].append([reply.decode('latin-1'), round(time.time() - started, 1)])
    s.close()
out["after"] = psycopg.connect(f"postgresql://anyone@127.0.0.1:{port}/lockstep").execute("select 7").fetchone()[0]
print(json.dumps(out))
"#;
    let out = Command::new("python3").args(["-c", script, server.port()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for (case, what) in [
        ("parse", "negative parameter type count"),
        ("bind_past", "parameter $1 runs past the message"),
        ("bind_negative", "parameter $1 has length -5"),
    ] {
        let reply = result[case].as_str().unwrap();
        assert!(reply.contains("FATAL") && reply.contains("08P01") && reply.contains(what), "{case}: {reply:?}");
        // Then the connection closes, without a ReadyForQuery inviting another query.
        assert!(reply.ends_with("\0\0"), "{case}: {reply:?}");
    }
    // A Bind of three values for one parameter: refused as PostgreSQL words it (it ran with
    // the extra values ignored); the connection goes on.
    let count = result["bind_count"].as_str().unwrap();
    assert!(count.contains("bind message supplies 3 parameters, but prepared statement \"\" requires 1"), "{count:?}");
    assert!(!count.contains("FATAL"), "{count:?}");
    let password = result["password"].as_str().unwrap();
    assert!(password.contains("FATAL") && password.contains("invalid frontend message type 112"), "{password:?}");
    for (reply, secs) in result["short_startup"].as_array().unwrap().iter().map(|r| (&r[0], &r[1])) {
        assert_eq!(reply, "", "{result}");
        assert!(secs.as_f64().unwrap() < 15.0, "{result}");
    }
    let all = result["execute_all"].as_str().unwrap();
    assert!(all.contains("42") && all.contains("SELECT 1"), "{all:?}");
    assert_eq!(result["after"], 7);
    let _ = server.child.kill();
    let mut err = String::new();
    server.child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(!err.contains("panicked"), "{err}");
}

/// A float parameter where the statement makes `$1` an integer (`$1 * 2`: DataFusion types it
/// from the literal) is refused when the cast would change it, instead of 1.5 silently
/// becoming 1 (0.0015 in `value > $1 * 1000` became 0: a wrong count); a whole float, an int
/// and a float where the statement takes a float go through. Text and binary alike.
#[test]
fn pg_float_parameters_are_not_truncated() {
    let script = r#"
out = []
for binary in (False, True):
    for sql, p in [("SELECT %s * 2", 1.5), ("SELECT %s * 2", 3.0), ("SELECT %s * 2", 4), ("SELECT %s * 2.5", 1.5)]:
        try:
            out.append(str(conn.execute(sql, (p,), binary=binary).fetchone()[0]))
        except psycopg.Error as e:
            out.append([e.sqlstate, str(e).strip()])
print(json.dumps(out))
"#;
    let Some(result) = psycopg_on_a_new_server(script) else { return };
    let result = result.as_array().unwrap().clone();
    for half in result.chunks(4) {
        assert_eq!(half[0][0], "22P02", "{result:?}");
        assert!(half[0][1].as_str().unwrap().contains("1.5 would change as Int64"), "{result:?}");
        assert_eq!(
            half[1..],
            [serde_json::json!("6"), serde_json::json!("8"), serde_json::json!("3.75")],
            "{result:?}"
        );
    }
    assert_eq!(result.len(), 8);
}

/// psycopg's binary parameters of type date, interval, uuid and numeric (what it sends for
/// `datetime.date`, `timedelta`, `UUID` and `Decimal`) are decoded, not read as UTF-8 text (a
/// date failed with its raw bytes in the message, whose NULs broke the error's framing); text
/// and binary give the same rows.
#[test]
fn pg_binary_date_interval_uuid_and_numeric_parameters() {
    let script = r#"
import datetime, decimal, uuid
params = (datetime.date(2026, 3, 2), datetime.timedelta(days=1, seconds=90, microseconds=5),
          uuid.UUID("12345678-1234-5678-1234-567812345678"), decimal.Decimal("-1234.5678"))
sql = """SELECT CAST(%s AS DATE) AS d, CAST('2026-03-02T00:00:00' AS TIMESTAMP) + CAST(%s AS INTERVAL) AS t,
         CAST(%s AS VARCHAR) AS u, CAST(%s AS DOUBLE) AS n"""
print(json.dumps([[str(v) for v in conn.execute(sql, params, binary=b).fetchone()] for b in (False, True)]))
"#;
    let Some(result) = psycopg_on_a_new_server(script) else { return };
    let want = serde_json::json!([
        "2026-03-02",
        "2026-03-03 00:01:30.000005+00:00",
        "12345678-1234-5678-1234-567812345678",
        "-1234.5678"
    ]);
    assert_eq!(result[0], want, "text: {result}");
    assert_eq!(result[1], want, "binary: {result}");
}

/// `SET statement_timeout` shortens a session's time limit (QA pass 18, F15: it answered
/// `SET` and the statement ran to the server's 60 s), `SET LOCAL` until the block ends, and
/// `SHOW` says the limit in effect; a parameter without effect answers with a NOTICE, and
/// DataFusion's settings (the server's) are refused. Through psycopg, as a driver sends them.
#[test]
fn pg_statement_timeout_is_honoured_and_other_settings_say_what_they_do() {
    let script = r#"
import time
slow = "SELECT count(*) FROM generate_series(1, 10000000000) a WHERE a.value % 7 = 3"
notices = []
conn.add_notice_handler(lambda d: notices.append([d.severity, d.sqlstate, d.message_primary]))
out = {"default": conn.execute("SHOW statement_timeout").fetchone()[0]}
conn.execute("SET statement_timeout = '300ms'")
out["set"] = conn.execute("SHOW statement_timeout").fetchone()[0]
def timed(sql):
    started = time.time()
    try:
        conn.execute(sql).fetchall()
        return ["ran"]
    except psycopg.Error as e:
        return [e.sqlstate, str(e).strip(), round(time.time() - started, 1)]
out["timeout"] = timed(slow)
out["after"] = conn.execute("SELECT 41 + 1").fetchone()[0]
conn.execute("RESET statement_timeout")
out["reset"] = conn.execute("SHOW statement_timeout").fetchone()[0]
conn.execute("BEGIN")
conn.execute("SET LOCAL statement_timeout = 200")
out["local"] = timed(slow)
conn.execute("ROLLBACK")
out["after_block"] = conn.execute("SHOW statement_timeout").fetchone()[0]
# Several statements in one string are an implicit block, as in PostgreSQL: SET LOCAL limits
# the statement after it (a comment in the SET is read as one).
out["implicit"] = timed("SET LOCAL statement_timeout = 250 /* ms */; " + slow)
out["after_implicit"] = conn.execute("SHOW statement_timeout").fetchone()[0]
conn.execute("SET LOCAL statement_timeout = 200")
conn.execute("SET work_mem = '1GB'")
conn.execute("SET extra_float_digits = 3")
out["notices"] = notices
for bad in ["SET datafusion.runtime.memory_limit = '100G'", "SET statement_timeout = '5 fortnights'"]:
    try:
        conn.execute(bad)
        out.setdefault("refused", []).append("accepted")
    except psycopg.Error as e:
        out.setdefault("refused", []).append([e.sqlstate, str(e).strip()])
print(json.dumps(out))
"#;
    let Some(out) = psycopg_on_a_new_server(script) else { return };
    assert_eq!((out["default"].as_str(), out["set"].as_str()), (Some("5min"), Some("300ms")), "{out}");
    assert_eq!(out["timeout"][0], "57014", "{out}");
    assert!(out["timeout"][1].as_str().unwrap().contains("statement timeout (300 ms; SET statement_timeout)"), "{out}");
    assert!(out["timeout"][2].as_f64().unwrap() < 10.0, "{out}");
    assert_eq!(out["after"], 42, "{out}");
    assert_eq!(out["reset"], "5min", "{out}");
    assert_eq!(out["local"][0], "57014", "{out}");
    assert!(out["local"][1].as_str().unwrap().contains("200 ms"), "{out}");
    assert_eq!(out["after_block"], "5min", "{out}");
    assert_eq!(out["implicit"][0], "57014", "{out}");
    assert!(out["implicit"][1].as_str().unwrap().contains("250 ms"), "{out}");
    assert_eq!(out["after_implicit"], "5min", "{out}");
    // SET LOCAL outside a block warns; work_mem has no effect; extra_float_digits is quiet.
    let notices = out["notices"].as_array().unwrap();
    assert_eq!(notices.len(), 2, "{out}");
    assert_eq!((notices[0][0].as_str(), notices[0][1].as_str()), (Some("WARNING"), Some("25P01")), "{out}");
    assert_eq!((notices[1][0].as_str(), notices[1][1].as_str()), (Some("NOTICE"), Some("00000")), "{out}");
    assert!(notices[1][2].as_str().unwrap().contains("\"work_mem\" is accepted and has no effect"), "{out}");
    assert_eq!(out["refused"][0][0], "55P02", "{out}");
    assert_eq!(out["refused"][1][0], "22023", "{out}");
    assert!(out["refused"][1][1].as_str().unwrap().contains("valid units"), "{out}");
}

/// Results of types arrow-pg has no encoding for go as text in Arrow's notation instead of
/// failing the statement with XX000 (QA pass 18, F17): a list of lists (`array_agg` of lists),
/// a map, a list of maps, a 256-bit decimal, and a list holding any of them inside (a struct
/// with a map); a half float goes as float4. Text and binary agree.
#[test]
fn pg_lists_of_lists_maps_and_half_floats_are_sent() {
    let script = r#"
sql = """SELECT [[1, 2], [3]] AS a, map(['a', 'b'], [1, 2]) AS m, [map(['a'], [1])] AS lm,
         arrow_cast(1.5, 'Float16') AS h, arrow_cast(1.25, 'Decimal256(10, 2)') AS d,
         (SELECT array_agg(x) FROM (VALUES ([1, 2]), ([3])) t(x)) AS agg,
         make_array(named_struct('m', map(['a'], [1]))) AS ls, [[arrow_cast(1.5, 'Decimal256(10, 2)')]] AS dd"""
out = {}
for binary in (False, True):
    cur = conn.cursor(binary=binary)
    row = cur.execute(sql).fetchone()
    out["binary" if binary else "text"] = [str(v) for v in row]
    out["types"] = [c.type_code for c in cur.description]
print(json.dumps(out))
"#;
    let Some(out) = psycopg_on_a_new_server(script) else { return };
    let want = serde_json::json!([
        "[[1, 2], [3]]",
        "{a: 1, b: 2}",
        "[{a: 1}]",
        "1.5",
        "1.25",
        "[[1, 2], [3]]",
        "[{m: {a: 1}}]",
        "[[1.50]]"
    ]);
    assert_eq!(out["text"], want, "{out}");
    assert_eq!(out["binary"], want, "{out}");
    // text, text, text, float4, text, text, text, text (PostgreSQL's type oids).
    assert_eq!(out["types"], serde_json::json!([25, 25, 25, 700, 25, 25, 25, 25]), "{out}");
}

/// A join that computes from memory — the outer cross join here builds the product of two
/// small sides and pairs it with every batch of the third — is stopped by a statement timeout:
/// the statement threads are free for the next statement (QA pass 23b: the join went on after
/// the 57014, both statement threads stayed busy, and every statement of every client timed
/// out for 21 minutes).
#[test]
fn a_timed_out_cross_join_frees_the_statement_threads() {
    let script = r#"
out = {}
conn.execute("SET statement_timeout = '2s'")
try:
    conn.execute("SELECT count(*), sum(a.value + b.value + c.value) FROM generate_series(1, 1000) a, "
                 "generate_series(1, 1000) b, generate_series(1, 10000000) c").fetchall()
except psycopg.Error as e:
    out["join"] = e.sqlstate
conn.execute("SET statement_timeout = '5s'")
out["after"] = []
for _ in range(3):
    try:
        out["after"].append(conn.execute("SELECT 1").fetchone()[0])
    except psycopg.Error as e:
        out["after"].append(e.sqlstate)
print(json.dumps(out))
"#;
    let Some(result) = psycopg_on_a_new_server(script) else { return };
    assert_eq!(result["join"], "57014", "{result}");
    assert_eq!(result["after"], serde_json::json!([1, 1, 1]), "{result}");
}

/// Errors of the data or the names in a statement carry PostgreSQL's SQLSTATE, not XX000
/// (internal error) or the generic 42000 (QA pass 23b), so clients and poolers can tell a bad
/// statement from a broken server.
#[test]
fn data_and_name_errors_carry_their_sqlstate() {
    let script = r#"
out = {}
for name, sql in [("div", "SELECT 1 / 0"), ("cast", "SELECT CAST('abc' AS INT)"),
                  ("overflow", "SELECT abs(CAST(-9223372036854775808 AS BIGINT))"),
                  ("regex", "SELECT regexp_like('x', '(')"), ("column", "SELECT nope FROM samples"),
                  ("table", "SELECT * FROM nope")]:
    try:
        conn.execute(sql).fetchall()
        out[name] = "ok"
    except psycopg.Error as e:
        out[name] = e.sqlstate
print(json.dumps(out))
"#;
    let Some(result) = psycopg_on_a_new_server(script) else { return };
    let expected = serde_json::json!({
        "div": "22012", "cast": "22P02", "overflow": "22003", "regex": "2201B", "column": "42703", "table": "42P01"
    });
    assert_eq!(result, expected);
}

/// Like the gRPC port: a public --pg-listen without tokens is refused unless --insecure.
#[test]
fn pg_listen_exposure_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let err = Serve::start(&db, "0.0.0.0:0", &[]).err().expect("a public listener without tokens must be refused");
    assert!(err.contains("refusing to listen on 0.0.0.0:0 without authentication"), "{err}");
    let server = Serve::start(&db, "0.0.0.0:0", &["--insecure"]).unwrap();
    assert!(server.pg.starts_with("0.0.0.0:"), "{}", server.pg);
}
