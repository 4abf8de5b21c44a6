//! Distributed SQL with real processes on loopback: `lockstep worker` processes and a
//! coordinating `lockstep sql --workers`, over a local store and over a bucket of a real
//! S3-compatible server (moto), compared with the same SQL in one process.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::objstore::{lockstep_s3, moto_and_tmp, split_bundle};
use super::{ok, ok_with_closed_stdout};

/// A `lockstep worker` process; killed on drop.
pub(super) struct Worker {
    pub(super) child: Child,
    pub(super) addr: String,
}

impl Worker {
    /// Starts a worker over the store of `store_args` (`--data-dir …` / `--data-url …`), with
    /// the S3 environment of `endpoint` if given.
    pub(super) fn start(store_args: &[&str], endpoint: Option<&str>) -> Worker {
        let mut args = vec!["worker", "--listen", "127.0.0.1:0"];
        args.extend_from_slice(store_args);
        let mut cmd = match endpoint {
            Some(e) => lockstep_s3(e, &args),
            None => {
                let mut c = Command::new(env!("CARGO_BIN_EXE_lockstep"));
                c.args(&args);
                c
            }
        };
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line.trim().rsplit(' ').next().unwrap().to_string();
        assert!(line.contains("listening on") && addr.contains(':'), "worker said {line:?}");
        Worker { child, addr }
    }

    pub(super) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Questions whose answers must not depend on where they run: scans, per-host and per-series
/// aggregates (mergeable and whole-series), a correlation, change points and a join with the
/// topology tables, a value threshold (value ranges prune on the workers too). Float sums are
/// rounded: their last bits depend on the order of addition.
const QUERIES: [&str; 10] = [
    "SELECT count(*) AS n, round(sum(value), 3) AS s, min(time) AS t0, max(time) AS t1 FROM samples",
    "SELECT host, count(*) AS n, round(avg(value), 6) AS a, max(value) AS hi FROM samples GROUP BY host ORDER BY host",
    "SELECT series_id, quantile_cont(value, 0.99) AS p99, count(*) AS n FROM samples \
     WHERE metric = 'DCGM_FI_DEV_POWER_USAGE' GROUP BY series_id ORDER BY series_id",
    "SELECT metric, round(ddsketch_quantile(ddsketch(value), 0.5), 9) AS median FROM samples \
     GROUP BY metric ORDER BY metric",
    "SELECT host, change_points(time, value) AS cps FROM samples \
     WHERE metric = 'DCGM_FI_DEV_POWER_USAGE' AND gpu = '0' GROUP BY host ORDER BY host",
    "SELECT r['lag_ns'] AS lag, round(r['coef'], 9) AS coef, r['n'] AS n FROM (SELECT lag_corr(b, x, y, \
     INTERVAL '30 seconds') AS r FROM (SELECT date_bin(INTERVAL '1 second', time) AS b, \
     avg(CASE WHEN host = 'node-01' AND gpu = '0' THEN value END) AS x, \
     avg(CASE WHEN host = 'node-02' AND gpu = '0' THEN value END) AS y \
     FROM samples WHERE metric = 'DCGM_FI_DEV_POWER_USAGE' GROUP BY b))",
    "SELECT n.node, count(*) AS samples FROM samples s JOIN topology_nodes n ON s.host = n.node \
     GROUP BY n.node ORDER BY n.node",
    "SELECT host, metric, count(*) AS n FROM samples WHERE time >= (SELECT min(time) FROM samples) + INTERVAL '1 minute' \
     GROUP BY host, metric ORDER BY host, metric LIMIT 20",
    "SELECT time, host, metric, value FROM samples WHERE metric = 'train_step_duration_seconds' \
     ORDER BY time, host LIMIT 50",
    "SELECT metric, count(*) AS n, max(value) AS hi FROM samples WHERE value > 1000 AND value <= 1e12 \
     GROUP BY metric ORDER BY metric",
];

fn simulated_store(dir: &Path) -> String {
    let bundle = dir.join("bundle");
    ok(&["simulate", "--out", bundle.to_str().unwrap(), "--nodes", "4", "--minutes", "3", "--seed", "5"]);
    bundle.display().to_string()
}

/// Runs `args` with the S3 environment if `endpoint` is given; returns stdout.
fn run(endpoint: Option<&str>, args: &[&str]) -> String {
    let out = match endpoint {
        Some(e) => lockstep_s3(e, args).output().unwrap(),
        None => Command::new(env!("CARGO_BIN_EXE_lockstep")).args(args).output().unwrap(),
    };
    assert!(out.status.success(), "lockstep {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Every query gives the same rows on one process and on the cluster, and the cluster's plan
/// really runs the scan on the workers.
fn same_answers(endpoint: Option<&str>, store: &[&str], workers: &str) {
    for q in QUERIES {
        let mut single = vec!["sql", "--format", "json"];
        single.extend_from_slice(store);
        single.push(q);
        let want = run(endpoint, &single);
        let mut dist = vec!["sql", "--format", "json", "--workers", workers, "--rows-per-task", "2000"];
        dist.extend_from_slice(store);
        dist.push(q);
        let got = run(endpoint, &dist);
        assert!(!want.trim().is_empty(), "{q}: no rows");
        assert_eq!(got, want, "{q}");
    }
    let mut explain = vec!["sql", "--format", "csv", "--workers", workers, "--rows-per-task", "2000"];
    explain.extend_from_slice(store);
    explain.push("EXPLAIN ANALYZE SELECT host, count(*) FROM samples GROUP BY host");
    let plan = run(endpoint, &explain);
    assert!(plan.contains("DistributedExec") && plan.contains("NetworkShuffleExec"), "{plan}");
    // The scan stage ran as two tasks, each with its own share of the units.
    assert!(plan.contains("tasks=2") && plan.contains("t0: SamplesExec") && plan.contains("t1: SamplesExec"), "{plan}");
}

#[test]
fn distributed_sql_matches_one_process_on_a_local_store() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = simulated_store(dir.path());
    let store = dir.path().join("store");
    let store = store.to_str().unwrap();
    ok(&["import", "--data-dir", store, &bundle]);
    let (a, b) = (Worker::start(&["--data-dir", store], None), Worker::start(&["--data-dir", store], None));
    let workers = format!("{},{}", a.addr, b.addr);
    same_answers(None, &["--data-dir", store], &workers);
    ok_with_closed_stdout(&[
        "sql",
        "--data-dir",
        store,
        "--workers",
        &workers,
        "--rows-per-task",
        "2000",
        "SELECT * FROM samples",
    ]);

    // A statement that is not cut into stages (one worker, or a scan under --rows-per-task)
    // runs here, with the same answer, and says so; one that is cut into stages does not.
    let query = "SELECT host, count(*) AS n FROM samples GROUP BY host ORDER BY host";
    let local = run(None, &["sql", "--data-dir", store, query]);
    for (list, rows, runs_here) in
        [(a.addr.as_str(), "2000", true), (&workers, "1000000000", true), (&workers, "2000", false)]
    {
        let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
            .args(["sql", "--data-dir", store, "--workers", list, "--rows-per-task", rows, query])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), local, "--workers {list} --rows-per-task {rows}");
        assert_eq!(stderr.contains("runs in this process, not on --workers"), runs_here, "{list} {rows}: {stderr}");
    }

    // Workers of another dataset refuse the plan with a clear error. (Two of them: with one
    // worker every stage has one task, and the planner keeps such a plan on the coordinator.)
    let other = dir.path().join("other");
    let other = other.to_str().unwrap();
    ok(&["import", "--data-dir", other, &bundle]);
    let (c, d) = (Worker::start(&["--data-dir", other], None), Worker::start(&["--data-dir", other], None));
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["sql", "--data-dir", store, "--workers", &format!("{},{}", c.addr, d.addr), "--rows-per-task", "2000"])
        .arg("SELECT host, count(*) FROM samples GROUP BY host")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("dataset") && !stderr.contains("panicked"), "{stderr}");

    // Another store at the same path (moved away, another bundle imported there) while the
    // workers hold a snapshot of the old one: they read the store the plan was made on (by
    // store id), not their snapshot (QA pass 22: the coordinator printed the old store's rows).
    std::fs::rename(store, dir.path().join("store-old")).unwrap();
    let second = dir.path().join("bundle-2");
    ok(&["simulate", "--out", second.to_str().unwrap(), "--nodes", "4", "--minutes", "2", "--seed", "6"]);
    ok(&["import", "--data-dir", store, second.to_str().unwrap()]);
    let local = run(None, &["sql", "--data-dir", store, query]);
    let got = run(None, &["sql", "--data-dir", store, "--workers", &workers, "--rows-per-task", "2000", query]);
    assert_eq!(got, local, "the workers read the store now at the path");
}

/// `lockstep sql QUERY` on `workers` (small tasks, so every worker gets some), its output piped.
fn spawn_sql(store: &str, workers: &str, query: &str) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["sql", "--data-dir", store, "--workers", workers, "--rows-per-task", "2000", query])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A worker killed while a query runs: the query fails with an error naming the failure,
/// promptly (no hang), and the next query on the remaining worker succeeds.
#[test]
fn killed_worker_fails_the_query_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = simulated_store(dir.path());
    let store = dir.path().join("store");
    let store = store.to_str().unwrap();
    ok(&["import", "--data-dir", store, &bundle]);
    let (mut a, b) = (Worker::start(&["--data-dir", store], None), Worker::start(&["--data-dir", store], None));
    let workers = format!("{},{}", a.addr, b.addr);
    // A three-way self-join on series (billions of rows): it runs until the worker is killed.
    let heavy = "SELECT count(*) FROM samples x JOIN samples y ON x.series_id = y.series_id \
                 JOIN samples z ON y.series_id = z.series_id";
    let mut child = spawn_sql(store, &workers, heavy);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(child.try_wait().unwrap().is_none(), "the query ended before its worker was killed");
    a.kill();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the query hung after its worker died");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a query whose worker died mid-way succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(stderr.starts_with("error:") && !stderr.contains("panicked"), "{stderr}");
    // The other worker still serves.
    let n =
        ok(&["sql", "--data-dir", store, "--workers", &b.addr, "--format", "csv", "SELECT count(*) AS n FROM samples"]);
    let single = ok(&["sql", "--data-dir", store, "--format", "csv", "SELECT count(*) AS n FROM samples"]);
    assert_eq!(n, single);
    // A worker that stops answering with its port open (SIGSTOP: the kernel still accepts
    // connections) fails the query after the timeouts, naming the worker; it once hung the
    // coordinator for good.
    let c = Worker::start(&["--data-dir", store], None);
    let pid = b.child.id().to_string();
    assert!(Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    let started = Instant::now();
    let workers = format!("{},{}", c.addr, b.addr);
    let mut child = spawn_sql(store, &workers, heavy);
    let deadline = Instant::now() + Duration::from_secs(90);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let hung = child.try_wait().unwrap().is_none();
    if hung {
        let _ = child.kill();
    }
    assert!(Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
    assert!(!hung, "the query hung on a stopped worker");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains(b.addr.trim_start_matches("http://")), "{stderr}");
    eprintln!("a stopped worker failed the query after {:?}", started.elapsed());
}

/// The local cluster: a bucket of a real S3 server (moto), two ingest nodes writing
/// disjoint hosts under one dataset root, two workers reading the dataset from there with their
/// own (empty) caches, and a coordinator with its own: the same answers as one process reading
/// the dataset.
#[test]
fn distributed_sql_over_a_two_node_dataset_in_a_bucket_matches_one_process() {
    let Some((moto, tmp)) = moto_and_tmp() else { return };
    let endpoint = moto.endpoint.clone();
    let bundle = simulated_store(tmp.path());
    let (b0, b1) = (tmp.path().join("bundle-0"), tmp.path().join("bundle-1"));
    split_bundle(Path::new(&bundle), [&b0, &b1]);
    let root = "s3://lockstep/cluster-a";
    for (b, node) in [(&b0, "node-0"), (&b1, "node-1")] {
        let dir = tmp.path().join(format!("writer-{node}"));
        let url = format!("{root}/{node}");
        run(Some(&endpoint), &["import", "--data-dir", dir.to_str().unwrap(), "--data-url", &url, b.to_str().unwrap()]);
    }
    let local = |name: &str| tmp.path().join(name).display().to_string();
    let (wa, wb, coord) = (local("wa"), local("wb"), local("coord"));
    let a = Worker::start(&["--data-dir", &wa, "--data-url", root], Some(&endpoint));
    let b = Worker::start(&["--data-dir", &wb, "--data-url", root], Some(&endpoint));
    same_answers(Some(&endpoint), &["--data-dir", &coord, "--data-url", root], &format!("{},{}", a.addr, b.addr));
}
