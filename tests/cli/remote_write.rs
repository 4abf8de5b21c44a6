//! A real Prometheus scrapes itself every second and remote-writes (1.0) to `lockstep serve
//! --http-listen` with a bearer token; `lockstep sql` over the live store sees the samples.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use super::lockstep;

pub(super) const PROMETHEUS: &str = "prometheus";
const TOKEN: &str = "prom-write-token-0123456789";

/// A child process killed (and reaped) on drop.
pub(super) struct Killed(pub(super) Child, pub(super) Option<BufReader<ChildStdout>>);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(super) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Rows of `lockstep sql --format json`, or none while the query fails (no data yet).
pub(super) fn sql_rows(db: &Path, query: &str) -> Vec<serde_json::Value> {
    let out = lockstep(&["sql", "--data-dir", db.to_str().unwrap(), "--format", "json", query]);
    if !out.status.success() {
        return Vec::new();
    }
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// A self-signed certificate for `127.0.0.1` (cert, key) made with the openssl CLI.
fn make_cert(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let status = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
        .args(["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE", "-addext", "extendedKeyUsage=serverAuth"])
        .args(["-keyout", key.to_str().unwrap(), "-out", cert.to_str().unwrap()])
        .stderr(Stdio::null())
        .status()
        .expect("the openssl CLI is needed to make a test certificate");
    assert!(status.success());
    (cert, key)
}

#[test]
fn prometheus_remote_write_into_serve() {
    prometheus_case(false);
}

/// The same over TLS: the HTTP listener uses the server's certificate, Prometheus verifies it.
#[test]
fn prometheus_remote_write_into_serve_over_tls() {
    prometheus_case(true);
}

fn prometheus_case(tls: bool) {
    if Command::new(PROMETHEUS).arg("--version").output().is_err() {
        assert!(std::env::var_os("LOCKSTEP_REQUIRE_PROMETHEUS").is_none(), "{PROMETHEUS} is required but missing");
        eprintln!("skipped: {PROMETHEUS} is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let tokens = tmp.path().join("tokens");
    std::fs::write(&tokens, format!("write {TOKEN}\n")).unwrap();
    let server_log = std::fs::File::create(tmp.path().join("serve.log")).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_lockstep"));
    command.args(["serve", "--data-dir", db.to_str().unwrap(), "--listen", "127.0.0.1:0"]).args([
        "--http-listen",
        "127.0.0.1:0",
        "--token-file",
        tokens.to_str().unwrap(),
    ]);
    let mut tls_config = String::new();
    if tls {
        let (cert, key) = make_cert(tmp.path());
        command.args(["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()]);
        tls_config = format!("    tls_config:\n      ca_file: {}\n", cert.display());
    }
    let mut child = command.stdout(Stdio::piped()).stderr(server_log).spawn().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut server = Killed(child, Some(stdout));
    let (mut grpc_line, mut http_line) = (String::new(), String::new());
    let stdout = server.1.as_mut().unwrap();
    stdout.read_line(&mut grpc_line).unwrap();
    stdout.read_line(&mut http_line).unwrap();
    let log = || std::fs::read_to_string(tmp.path().join("serve.log")).unwrap_or_default();
    assert!(grpc_line.starts_with("listening on "), "{grpc_line}: {}", log());
    let url = http_line
        .strip_prefix("prometheus remote write on ")
        .unwrap_or_else(|| panic!("no remote write address: {http_line:?} {}", log()))
        .trim()
        .to_string();
    let scheme = if tls { "https" } else { "http" };
    assert!(url.starts_with(&format!("{scheme}://127.0.0.1:")) && url.ends_with("/api/v1/write"), "{url}");

    let port = free_port();
    let config = tmp.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: self\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n\
             remote_write:\n  - url: {url}\n    authorization:\n      credentials: {TOKEN}\n\
             {tls_config}\x20   queue_config:\n      batch_send_deadline: 1s\n"
        ),
    )
    .unwrap();
    let prom_log = std::fs::File::create(tmp.path().join("prometheus.log")).unwrap();
    let prometheus = Killed(
        Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", tmp.path().join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(prom_log)
            .spawn()
            .unwrap(),
        None,
    );

    let query = "SELECT metric, host, count(*) AS n FROM samples \
                 WHERE metric IN ('up', 'prometheus_build_info') GROUP BY metric, host ORDER BY metric";
    let deadline = Instant::now() + Duration::from_secs(60);
    let rows = loop {
        let rows = sql_rows(&db, query);
        if rows.len() == 2 || Instant::now() > deadline {
            break rows;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let prom_log = std::fs::read_to_string(tmp.path().join("prometheus.log")).unwrap_or_default();
    assert_eq!(rows.len(), 2, "rows {rows:?}\nserve log:\n{}\nprometheus log:\n{prom_log}", log());
    for (row, metric) in rows.iter().zip(["prometheus_build_info", "up"]) {
        assert_eq!(row["metric"], metric, "{rows:?}");
        assert_eq!(row["host"], "127.0.0.1", "{rows:?}");
        assert!(row["n"].as_i64().unwrap() >= 1, "{rows:?}");
    }
    // The scrape target is up, the instance label is kept as it is.
    let up =
        sql_rows(&db, "SELECT max(value) AS v, max(instance) AS i, max(job) AS j FROM samples WHERE metric = 'up'");
    assert_eq!(up[0]["v"], 1.0, "{up:?}");
    assert_eq!(up[0]["i"], format!("127.0.0.1:{port}"), "{up:?}");
    assert_eq!(up[0]["j"], "self", "{up:?}");
    // Prometheus got no errors back (a 4xx would be logged as a dropped batch).
    assert!(!prom_log.contains("non-recoverable error"), "{prom_log}");
    drop(prometheus);
    // SIGTERM: the HTTP listener drains with the gRPC one and the server exits cleanly.
    let started = Instant::now();
    let mut server = server;
    assert!(Command::new("kill").args(["-TERM", &server.0.id().to_string()]).status().unwrap().success());
    let status = server.0.wait().unwrap();
    assert!(status.success(), "serve exited with {status}: {}", log());
    assert!(started.elapsed() < Duration::from_secs(20), "shutdown took {:?}", started.elapsed());
    assert!(log().contains("stopped: "), "{}", log());
}

/// `http_listen` from the TOML config; a public `--http-listen` without tokens is refused like
/// a public `--listen`.
#[test]
fn http_listen_from_config_and_exposure_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["serve", "--data-dir", db.to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .args(["--http-listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refusing to listen on 0.0.0.0:0 without authentication"), "{err}");

    let config = tmp.path().join("serve.toml");
    std::fs::write(&config, "listen = \"127.0.0.1:0\"\nhttp_listen = \"127.0.0.1:0\"\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["serve", "--data-dir", db.to_str().unwrap(), "--config", config.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut server = Killed(child, Some(stdout));
    let (mut first, mut second) = (String::new(), String::new());
    let stdout = server.1.as_mut().unwrap();
    stdout.read_line(&mut first).unwrap();
    stdout.read_line(&mut second).unwrap();
    assert!(first.starts_with("listening on 127.0.0.1:"), "{first}");
    assert!(second.starts_with("prometheus remote write on http://127.0.0.1:"), "{second}");
}
