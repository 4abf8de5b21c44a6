//! The ready-made configurations in `docs/examples/` run with the real components: Prometheus
//! with `prometheus.yml` scraping a real node_exporter into `lockstep serve`; `serve.toml`
//! starting a server; the systemd unit passing `systemd-analyze verify`; the Slurm prolog and
//! epilog registering and ending a job over HTTP. Addresses and paths in the files are
//! rewritten to loopback and temporary paths; every rewrite must match, so the examples
//! cannot drift from what is tested.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::prom::{NODE_EXPORTER, node_exporter, scrape};
use super::remote_write::{Killed, PROMETHEUS, free_port, sql_rows};

const TOKEN: &str = "examples-write-token-0123456789";

fn example(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `text` with every `(from, to)` replaced; each `from` must occur.
fn rewrite(name: &str, text: &str, replacements: &[(&str, &str)]) -> String {
    let mut out = text.to_string();
    for (from, to) in replacements {
        assert!(out.contains(from), "docs/examples/{name} no longer contains {from:?}: update this test with it");
        out = out.replace(from, to);
    }
    out
}

/// `lockstep serve` with an HTTP listener and a write token; returns the process and the HTTP
/// base URL.
fn serve(tmp: &Path, db: &Path) -> (Killed, String) {
    let tokens = tmp.join("tokens");
    std::fs::write(&tokens, format!("write {TOKEN}\nread {TOKEN}\n")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["serve", "--data-dir", db.to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .args(["--http-listen", "127.0.0.1:0", "--token-file", tokens.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut http = None;
    for _ in 0..4 {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        if let Some(url) = line.trim().strip_prefix("prometheus remote write on ") {
            http = url.strip_suffix("/api/v1/write").map(str::to_string);
        }
    }
    (Killed(child, Some(stdout)), http.expect("serve printed no HTTP address"))
}

fn require(program: &str, version_arg: &str, env: &str) -> bool {
    if Command::new(program).arg(version_arg).output().is_ok() {
        return true;
    }
    assert!(std::env::var_os(env).is_none(), "{program} is required ({env}) but missing");
    eprintln!("skipped: {program} is not installed");
    false
}

/// `docs/examples/prometheus.yml`: a real Prometheus scrapes a real node_exporter and a
/// dcgm-exporter target that is down, and remote-writes into `lockstep serve`; SQL returns
/// the value node_exporter served and the targets' `up`.
#[test]
fn prometheus_example_scrapes_node_exporter_into_lockstep() {
    if !require(PROMETHEUS, "--version", "LOCKSTEP_REQUIRE_PROMETHEUS")
        || !require(NODE_EXPORTER, "--version", "LOCKSTEP_REQUIRE_NODE_EXPORTER")
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let (_server, http) = serve(tmp.path(), &db);
    let (_exporter, exporter_port) = node_exporter(&["meminfo", "loadavg"]);
    let token_file = tmp.path().join("lockstep.token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let (node, dcgm, prom_port) =
        (format!("['127.0.0.1:{exporter_port}']"), format!("['127.0.0.1:{}']", free_port()), free_port());
    let config = rewrite(
        "prometheus.yml",
        &example("prometheus.yml"),
        &[
            ("scrape_interval: 10s", "scrape_interval: 1s"),
            ("['gpu-node-01:9100', 'gpu-node-02:9100']", &node),
            ("['gpu-node-01:9400', 'gpu-node-02:9400']", &dcgm),
            ("http://lockstep.example:9201/api/v1/write", &format!("{http}/api/v1/write")),
            ("/etc/prometheus/lockstep.token", token_file.to_str().unwrap()),
            ("batch_send_deadline: 5s", "batch_send_deadline: 1s"),
        ],
    );
    let config_path = tmp.path().join("prometheus.yml");
    std::fs::write(&config_path, config).unwrap();
    let prom_log = tmp.path().join("prometheus.log");
    let _prometheus = Killed(
        Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!("--storage.tsdb.path={}", tmp.path().join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&prom_log).unwrap())
            .spawn()
            .unwrap(),
        None,
    );
    // MemTotal does not change while the test runs: the value Prometheus forwarded must be
    // exactly the one node_exporter serves.
    let served = (0..200)
        .find_map(|_| {
            let body = scrape(exporter_port);
            if body.is_none() {
                std::thread::sleep(Duration::from_millis(100));
            }
            body
        })
        .expect("node_exporter did not answer");
    let mem_total: f64 = served
        .lines()
        .find_map(|l| l.strip_prefix("node_memory_MemTotal_bytes "))
        .and_then(|v| v.trim().parse().ok())
        .expect("node_exporter serves node_memory_MemTotal_bytes");
    let query = "SELECT job, max(value) AS up FROM samples WHERE metric = 'up' GROUP BY job ORDER BY job";
    let deadline = Instant::now() + Duration::from_secs(60);
    let (up, mem) = loop {
        let up = sql_rows(&db, query);
        let mem = sql_rows(
            &db,
            "SELECT host, min(value) AS lo, max(value) AS hi, count(*) AS n FROM samples \
             WHERE metric = 'node_memory_MemTotal_bytes' GROUP BY host",
        );
        if (up.len() == 2 && !mem.is_empty()) || Instant::now() > deadline {
            break (up, mem);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let log = std::fs::read_to_string(&prom_log).unwrap_or_default();
    assert_eq!(up.len(), 2, "{up:?}\n{log}");
    assert_eq!((up[0]["job"].as_str(), up[0]["up"].as_f64()), (Some("dcgm"), Some(0.0)), "{up:?}");
    assert_eq!((up[1]["job"].as_str(), up[1]["up"].as_f64()), (Some("node"), Some(1.0)), "{up:?}");
    assert_eq!(mem.len(), 1, "{mem:?}");
    assert_eq!(mem[0]["host"], "127.0.0.1", "host is the instance without its port: {mem:?}");
    assert_eq!((mem[0]["lo"].as_f64(), mem[0]["hi"].as_f64()), (Some(mem_total), Some(mem_total)), "{mem:?}");
    assert!(!log.contains("non-recoverable error"), "{log}");
}

/// `docs/examples/serve.toml` starts a server (listen addresses and token path rewritten).
#[test]
fn serve_toml_example_starts_a_server() {
    let tmp = tempfile::tempdir().unwrap();
    let tokens = tmp.path().join("tokens");
    std::fs::write(&tokens, format!("write {TOKEN}\n")).unwrap();
    let config = rewrite(
        "serve.toml",
        &example("serve.toml"),
        &[
            ("\"0.0.0.0:4317\"", "\"127.0.0.1:0\""),
            ("\"0.0.0.0:9201\"", "\"127.0.0.1:0\""),
            ("/etc/lockstep/tokens", tokens.to_str().unwrap()),
        ],
    );
    let path = tmp.path().join("serve.toml");
    std::fs::write(&path, config).unwrap();
    let db = tmp.path().join("db");
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["serve", "--data-dir", db.to_str().unwrap(), "--config", path.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let server = Killed(child, Some(stdout));
    assert!(first.starts_with("listening on 127.0.0.1:"), "{first:?}");
    assert!(Command::new("kill").args(["-TERM", &server.0.id().to_string()]).status().unwrap().success());
}

/// `docs/examples/lockstep.service` passes `systemd-analyze verify` (ExecStart pointed at the
/// binary under test).
#[test]
fn systemd_unit_example_verifies() {
    if Command::new("systemd-analyze").arg("--version").output().is_err() {
        eprintln!("skipped: systemd-analyze is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let unit = rewrite(
        "lockstep.service",
        &example("lockstep.service"),
        &[("/usr/local/bin/lockstep", env!("CARGO_BIN_EXE_lockstep"))],
    );
    let path = tmp.path().join("lockstep.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze").arg("verify").arg(&path).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // Only complaints about this unit count (the host's own units may have warnings).
    let ours: Vec<&str> = err.lines().filter(|l| l.contains("lockstep.service")).collect();
    assert!(out.status.success() && ours.is_empty(), "{err}");
}

/// `docs/examples/slurm/prolog.sh` and `epilog.sh` against a real server: the job is
/// registered with its nodes at the prolog's time and ended by the epilog; `lockstep sql`
/// shows it in the `jobs` table.
#[test]
fn slurm_prolog_and_epilog_register_and_end_a_job() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let (server, http) = serve(tmp.path(), &db);
    let script =
        |name: &str| -> PathBuf { Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/slurm").join(name) };
    let run = |name: &str| {
        let out = Command::new("sh")
            .arg(script(name))
            .env("LOCKSTEP_URL", &http)
            .env("LOCKSTEP_TOKEN", TOKEN)
            .env("SLURM_JOB_ID", "4242")
            .env("SLURM_JOB_NODELIST", "gpu-node-01,gpu-node-02")
            .output()
            .unwrap();
        assert!(out.status.success() && out.stderr.is_empty(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let get_jobs = || -> serde_json::Value {
        let out = Command::new("curl")
            .args(["-fsS", &format!("{http}/api/v1/jobs"), "-H", &format!("Authorization: Bearer {TOKEN}")])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    // The inventory registers the topology once (the SQL domain tables need it).
    let topology = r#"{"nodes": [{"name": "gpu-node-01", "gpus": 8}, {"name": "gpu-node-02", "gpus": 8}]}"#;
    let out = Command::new("curl")
        .args(["-fsS", "-X", "PUT", &format!("{http}/api/v1/topology"), "-d", topology])
        .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64;
    run("prolog.sh");
    let jobs = get_jobs();
    assert_eq!(jobs[0]["job"], "4242", "{jobs}");
    assert_eq!(jobs[0]["slurm_job_id"], "4242", "{jobs}");
    assert_eq!(jobs[0]["nodes"], serde_json::json!(["gpu-node-01", "gpu-node-02"]), "{jobs}");
    assert!(jobs[0]["start"].as_i64().unwrap() >= before, "{jobs}");
    assert!(jobs[0]["end"].is_null(), "{jobs}");
    run("epilog.sh");
    let jobs = get_jobs();
    assert!(jobs[0]["end"].as_i64().unwrap() >= jobs[0]["start"].as_i64().unwrap(), "{jobs}");
    // A reader process sees the registered job in SQL.
    let rows = sql_rows(&db, "SELECT job, count(*) AS n FROM jobs GROUP BY job");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["job"], "4242", "{rows:?}");
    // A job on a node the topology does not know is refused: the prolog logs it.
    let out = Command::new("sh")
        .arg(script("prolog.sh"))
        .env("LOCKSTEP_URL", &http)
        .env("LOCKSTEP_TOKEN", TOKEN)
        .env("SLURM_JOB_ID", "4243")
        .env("SLURM_JOB_NODELIST", "gpu-node-99")
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("registering job 4243 failed"), "{err}");
    // With the server unreachable, the scripts log and never fail the Slurm job.
    drop(server);
    let out = Command::new("sh")
        .arg(script("epilog.sh"))
        .env("LOCKSTEP_URL", &http)
        .env("LOCKSTEP_TOKEN", TOKEN)
        .env("SLURM_JOB_ID", "4242")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ending job 4242 failed"));
}
