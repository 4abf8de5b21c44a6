//! `lockstep import` of Prometheus text / OpenMetrics scrape files: a real node_exporter's
//! scrapes, timestamps in both formats, the scrape target as host, and all-or-nothing errors
//! that name the file and line.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{lockstep, ok};

/// Debian's node_exporter (`apt install prometheus-node-exporter`); the CI installs it.
pub(super) const NODE_EXPORTER: &str = "prometheus-node-exporter";

pub(super) struct Exporter(pub(super) Child);

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A node_exporter on a free loopback port with only `collectors` enabled, and its port.
pub(super) fn node_exporter(collectors: &[&str]) -> (Exporter, u16) {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new(NODE_EXPORTER)
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--collector.disable-defaults")
        .args(collectors.iter().map(|c| format!("--collector.{c}")))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (Exporter(child), port)
}

/// One `GET /metrics` over HTTP/1.0 (no chunking, no compression): the body.
pub(super) fn scrape(port: u16) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    (head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200")).then(|| body.to_string())
}

fn sql_json(db: &Path, query: &str) -> Vec<serde_json::Value> {
    ok(&["sql", "--data-dir", db.to_str().unwrap(), "--format", "json", query])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Two scrapes of a real node_exporter, saved as `curl` would, imported with the target as host
/// and the files' modification times as scrape times: the counters give a sane CPU rate.
#[test]
fn node_exporter_scrapes_import_and_query() {
    if Command::new(NODE_EXPORTER).arg("--version").output().is_err() {
        assert!(
            std::env::var_os("LOCKSTEP_REQUIRE_NODE_EXPORTER").is_none(),
            "{NODE_EXPORTER} is required but missing"
        );
        eprintln!("skipped: {NODE_EXPORTER} is not installed");
        return;
    }
    let (_exporter, port) = node_exporter(&["cpu", "meminfo", "loadavg"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        if let Some(body) = scrape(port) {
            break body;
        }
        assert!(Instant::now() < deadline, "node_exporter did not answer on port {port}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("scrape-1.prom"), tmp.path().join("scrape-2.prom"));
    std::fs::write(&a, &first).unwrap();
    std::thread::sleep(Duration::from_millis(2_000));
    std::fs::write(&b, scrape(port).unwrap()).unwrap();
    let db = tmp.path().join("db");
    let out = ok(&[
        "import",
        "--data-dir",
        db.to_str().unwrap(),
        "--host",
        "node-a",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert!(out.contains("from 2 scrape file(s)"), "{out}");

    let cpus =
        first.lines().filter(|l| l.starts_with("node_cpu_seconds_total{") && l.contains("mode=\"idle\"")).count();
    assert!(cpus > 0, "no CPU counters in the scrape");
    let rows = sql_json(
        &db,
        "SELECT count(*) AS n, count(DISTINCT host) AS hosts, min(host) AS host FROM samples WHERE metric = 'node_cpu_seconds_total' AND mode = 'idle'",
    );
    assert_eq!(rows[0]["n"], serde_json::json!(2 * cpus));
    assert_eq!(rows[0]["host"], "node-a");
    // Seconds of CPU time per second, summed over the modes of each CPU: about one.
    let rows = sql_json(
        &db,
        "SELECT cpu, sum(r) AS busy FROM (SELECT cpu, mode, rate(time, value) AS r FROM samples \
         WHERE metric = 'node_cpu_seconds_total' GROUP BY cpu, mode) GROUP BY cpu ORDER BY cpu",
    );
    assert_eq!(rows.len(), cpus);
    for row in &rows {
        let busy = row["busy"].as_f64().unwrap();
        assert!((0.5..1.5).contains(&busy), "cpu {}: {busy} s/s of CPU time", row["cpu"]);
    }
    let rows =
        sql_json(&db, "SELECT count(*) AS n FROM samples WHERE metric = 'node_memory_MemTotal_bytes' AND value > 0");
    assert_eq!(rows[0]["n"], serde_json::json!(2));
}

/// Timestamps of both formats, `host` from the sample or `--host`, `--scrape-time`, and a bad
/// line or a missing host importing nothing at all.
#[test]
fn scrape_files_timestamps_hosts_and_all_or_nothing_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let dbs = db.to_str().unwrap();
    // Prometheus text: integer ms; one sample without a timestamp takes --scrape-time.
    let text = tmp.path().join("a.prom");
    std::fs::write(
        &text,
        "# TYPE ib_port_xmit_wait_total counter\n\
         ib_port_xmit_wait_total{port=\"1\"} 10 1767225600000\n\
         ib_port_xmit_wait_total{port=\"1\"} 30 1767225610000\n\
         up 1\n\
         # TYPE rpc_seconds summary\n\
         rpc_seconds{quantile=\"0.5\"} NaN\n\
         rpc_seconds{quantile=\"0.99\"} NaN\n\
         rpc_seconds_sum 0\n\
         rpc_seconds_count 0\n",
    )
    .unwrap();
    // OpenMetrics: seconds with a fraction, `# EOF`; its own host label wins over --host.
    let om = tmp.path().join("b.om");
    std::fs::write(&om, "# TYPE gpu_temp gauge\ngpu_temp{host=\"node-b\",gpu=\"0\"} 61.5 1767225600.25\n# EOF\n")
        .unwrap();
    // A summary before its first observation (NaN quantiles, as the Go client exposes it):
    // its NaNs are counted and not stored, the rest imports.
    let out = ok(&[
        "import",
        "--data-dir",
        dbs,
        "--host",
        "node-a",
        "--scrape-time",
        "2026-01-01T00:00:05Z",
        text.to_str().unwrap(),
        om.to_str().unwrap(),
    ]);
    assert!(
        out.contains("imported 6 samples of 5 series") && out.contains("not stored: 2 NaN or ±inf samples"),
        "{out}"
    );
    assert!(out.contains(r#"rpc_seconds{host="node-a",quantile="0.5"}"#), "{out}");
    let rows = sql_json(
        &db,
        "SELECT metric, host, CAST(time AS BIGINT) AS t, value FROM samples WHERE metric NOT LIKE 'rpc%' ORDER BY metric, time",
    );
    let got: Vec<(String, String, i64, f64)> = rows
        .iter()
        .map(|r| {
            (
                r["metric"].as_str().unwrap().into(),
                r["host"].as_str().unwrap().into(),
                r["t"].as_i64().unwrap(),
                r["value"].as_f64().unwrap(),
            )
        })
        .collect();
    let t0 = 1_767_225_600_000_000_000i64;
    assert_eq!(
        got,
        vec![
            ("gpu_temp".into(), "node-b".into(), t0 + 250_000_000, 61.5),
            ("ib_port_xmit_wait_total".into(), "node-a".into(), t0, 10.0),
            ("ib_port_xmit_wait_total".into(), "node-a".into(), t0 + 10_000_000_000, 30.0),
            ("up".into(), "node-a".into(), t0 + 5_000_000_000, 1.0),
        ]
    );

    // A bad line in the second file: nothing of either file is imported; file and line named.
    let good = tmp.path().join("c.prom");
    std::fs::write(&good, "fresh_metric 1 1767225700000\n").unwrap();
    let bad = tmp.path().join("d.prom");
    std::fs::write(&bad, "# HELP x y\nfresh_metric 2 1767225710000\nfresh_metric{a=\"1\" 3\n").unwrap();
    let out = lockstep(&["import", "--data-dir", dbs, "--host", "h", good.to_str().unwrap(), bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("d.prom") && err.contains("line 3"), "{err}");
    // No host label and no --host: refused with the hint.
    let out = lockstep(&["import", "--data-dir", dbs, good.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--host"), "{}", String::from_utf8_lossy(&out.stderr));
    let rows = sql_json(&db, "SELECT count(*) AS n FROM samples WHERE metric = 'fresh_metric'");
    assert_eq!(rows[0]["n"], serde_json::json!(0));
    // Bundle-only and scrape-only flags are not mixed up.
    let out = lockstep(&["import", "--data-dir", dbs, "--skip-bad-rows", good.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("all or nothing"));
}
