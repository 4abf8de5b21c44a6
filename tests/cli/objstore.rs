//! The store on object storage (`--data-url s3://…`) against a real S3-compatible server:
//! `moto` in server mode (PyPI `moto[server]`), started on loopback by each test. Skipped
//! (loudly) when moto is missing, unless `LOCKSTEP_REQUIRE_MOTO` is set.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockstep_proto::ingest::v1::write_client::WriteClient;
use lockstep_proto::ingest::v1::{SeriesDefinition, SeriesSamples, WriteRequest};
use tonic::Code;

use super::T;

fn have_moto() -> bool {
    let probe = Command::new("python3").args(["-c", "import moto.server, boto3"]).output();
    if probe.is_ok_and(|o| o.status.success()) {
        return true;
    }
    assert!(
        std::env::var_os("LOCKSTEP_REQUIRE_MOTO").is_none(),
        "moto is required (LOCKSTEP_REQUIRE_MOTO) but missing"
    );
    eprintln!("skipped: moto is not installed (python3 -m pip install 'moto[server]')");
    false
}

/// A moto server and a temporary directory; `None` (the test is skipped) without moto.
pub(super) fn moto_and_tmp() -> Option<(Moto, tempfile::TempDir)> {
    have_moto().then(|| (Moto::start(), tempfile::tempdir().unwrap()))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A moto S3 server on loopback; killed on drop.
pub(super) struct Moto {
    child: Child,
    pub(super) endpoint: String,
}

impl Moto {
    fn start() -> Moto {
        let port = free_port();
        let child = Command::new("python3")
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto did not start on port {port}");
            std::thread::sleep(Duration::from_millis(100));
        }
        let moto = Moto { child, endpoint: format!("http://127.0.0.1:{port}") };
        moto.boto3(&[], "s3.create_bucket(Bucket='lockstep')");
        moto
    }

    /// Runs python with `s3` a boto3 client of this server; returns stdout.
    fn boto3(&self, args: &[&str], code: &str) -> String {
        let script = format!(
            "import sys, boto3\ns3 = boto3.client('s3', endpoint_url='{}', aws_access_key_id='test', \
             aws_secret_access_key='test', region_name='us-east-1')\n{code}\n",
            self.endpoint
        );
        let out = Command::new("python3").arg("-c").arg(script).args(args).output().unwrap();
        assert!(out.status.success(), "boto3 failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    /// The object keys under `prefix`, sorted.
    fn keys(&self, prefix: &str) -> Vec<String> {
        let out = self.boto3(
            &[prefix],
            "p = s3.get_paginator('list_objects_v2')\nfor page in p.paginate(Bucket='lockstep', Prefix=sys.argv[1]):\n    \
             for o in page.get('Contents', []): print(o['Key'])",
        );
        let mut keys: Vec<String> = out.lines().map(str::to_string).collect();
        keys.sort();
        keys
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `lockstep` with the S3 environment of `endpoint` (test credentials, plain HTTP).
pub(super) fn lockstep_s3(endpoint: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockstep"));
    cmd.args(args)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_ALLOW_HTTP", "true");
    cmd
}

fn ok_s3(endpoint: &str, args: &[&str]) -> String {
    let out = lockstep_s3(endpoint, args).output().unwrap();
    assert!(out.status.success(), "lockstep {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

const QUERIES: [&str; 4] = [
    "SELECT count(*) AS n, sum(value) AS s, min(time) AS t0, max(time) AS t1 FROM samples",
    "SELECT host, count(*) AS n, sum(value) AS s, max(value) AS hi FROM samples GROUP BY host ORDER BY host",
    "SELECT count(*) AS n FROM jobs",
    "SELECT count(*) AS n FROM clock_models",
];

/// `lockstep import` into s3://lockstep/… from one process; `lockstep sql` from another with
/// an empty local directory returns exactly what the same import into a local store returns.
#[test]
fn import_to_s3_then_a_fresh_reader_matches_a_local_store() {
    let Some((moto, tmp)) = moto_and_tmp() else { return };
    let bundle = tmp.path().join("bundle");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    super::ok(&["simulate", "--out", &s(&bundle), "--nodes", "4", "--minutes", "3", "--scenario", "storage-latency"]);
    let local = tmp.path().join("local");
    let started = Instant::now();
    super::ok(&["import", "--data-dir", &s(&local), &s(&bundle)]);
    let local_import = started.elapsed();
    let node = tmp.path().join("node");
    let url = "s3://lockstep/cluster-a/node-0";
    let started = Instant::now();
    let out = ok_s3(&moto.endpoint, &["import", "--data-dir", &s(&node), "--data-url", url, &s(&bundle)]);
    let s3_import = started.elapsed();
    assert!(out.contains("imported"), "{out}");

    // The bucket holds the store; the local directory only the WAL, the lock and the cache.
    let keys = moto.keys("cluster-a/node-0/");
    for k in ["cluster-a/node-0/manifest.json", "cluster-a/node-0/series.json", "cluster-a/node-0/jobs.json"] {
        assert!(keys.iter().any(|x| x == k), "{k} not in {keys:?}");
    }
    assert!(keys.iter().any(|k| k.starts_with("cluster-a/node-0/data/p") && k.ends_with(".parquet")), "{keys:?}");
    assert!(keys.iter().any(|k| k.starts_with("cluster-a/node-0/clock/")), "{keys:?}");
    assert!(!node.join("manifest.json").exists() && !node.join("data").exists());
    assert!(node.join("wal").is_dir());

    let reader = tmp.path().join("reader");
    for q in QUERIES {
        let expected = super::ok(&["sql", "--data-dir", &s(&local), "--format", "csv", q]);
        let started = Instant::now();
        let got = ok_s3(&moto.endpoint, &["sql", "--data-dir", &s(&reader), "--data-url", url, "--format", "csv", q]);
        eprintln!("{q}: {:?} from s3", started.elapsed());
        assert_eq!(got, expected, "{q}");
        assert!(expected.lines().count() >= 2, "{expected}");
    }
    eprintln!("import: {local_import:?} local, {s3_import:?} to moto");
    // The diagnosis too (all but its run time).
    assert_same_diagnosis(&moto.endpoint, &local, &reader, url);
    // The whole store reads back sound through the bucket.
    let checked = ok_s3(&moto.endpoint, &["check", "--data-dir", &s(&tmp.path().join("checker")), "--data-url", url]);
    assert!(checked.contains("with checksums") && checked.ends_with("no problems found\n"), "{checked}");
    // The reader cached the data files it read; no manifest or WAL of its own.
    assert!(reader.join("cache/s3/lockstep/cluster-a/node-0/data").is_dir());
    assert!(!reader.join("manifest.json").exists());
    // A URL without the prefix of a store is no store.
    let out = lockstep_s3(
        &moto.endpoint,
        &["sql", "--data-dir", &s(&reader), "--data-url", "s3://lockstep/none", "SELECT 1"],
    )
    .output()
    .unwrap();
    assert!(!out.status.success());
}

/// `diagnose --job llm-70b --format json` of the store or dataset at `url` (read through
/// `reader`) equals that of the local store `local`, all but its run time and the store its
/// next actions' commands name; it names suspects.
fn assert_same_diagnosis(endpoint: &str, local: &Path, reader: &Path, url: &str) {
    let (local_flags, url_flags) =
        (format!("--data-dir {}", local.display()), format!("--data-url {url} --data-dir {}", reader.display()));
    let diagnosis = |out: String| {
        let out = out.replace(&url_flags, "STORE").replace(&local_flags, "STORE");
        let mut v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v.as_object_mut().unwrap().remove("elapsed_ms");
        v
    };
    let job = ["--job", "llm-70b", "--format", "json"];
    let want = diagnosis(super::ok(&[&["diagnose", "--data-dir", local.to_str().unwrap()][..], &job].concat()));
    let args = [&["diagnose", "--data-dir", reader.to_str().unwrap(), "--data-url", url][..], &job].concat();
    assert_eq!(diagnosis(ok_s3(endpoint, &args)), want);
    assert!(want["suspects"].as_array().is_some_and(|f| !f.is_empty()), "{want}");
    assert!(want["next_action"].as_str().unwrap().contains("`lockstep sql STORE \""), "{want}");
}

/// A running `lockstep serve --data-url`; killed on drop.
struct Serve {
    child: Child,
    url: String,
}

impl Serve {
    fn start(endpoint: &str, data_dir: &Path, data_url: &str, extra: &[&str]) -> Serve {
        Serve::try_start(endpoint, data_dir, data_url, extra).unwrap_or_else(|e| panic!("serve did not start: {e}"))
    }

    /// SIGTERM (the store flushes and closes), then success.
    fn stop(mut self) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let status = self.child.wait().unwrap();
        let mut err = String::new();
        self.child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert!(status.success(), "serve exited with {status}: {err}");
    }

    fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request of `n` samples of `objstore_probe{host="h<batch % 4>"}` (value = batch),
/// at distinct times per batch.
fn request(batch: i64, n: i64) -> WriteRequest {
    request_of("objstore_probe", batch, n)
}

/// [`request`] for another metric.
fn request_of(metric: &str, batch: i64, n: i64) -> WriteRequest {
    let mut labels = std::collections::HashMap::new();
    labels.insert("host".to_string(), format!("h{}", batch % 4));
    let mut prev = 0;
    let deltas = (0..n)
        .map(|i| {
            let t = T + (batch * n + i) * 1_000_000;
            let d = t - prev;
            prev = t;
            d
        })
        .collect();
    WriteRequest {
        definitions: vec![SeriesDefinition { r#ref: 1, metric: metric.into(), labels }],
        series: vec![SeriesSamples { r#ref: 1, timestamp_deltas: deltas, values: vec![batch as f64; n as usize] }],
        sequence: batch as u64,
        columns: None,
    }
}

/// Sends batches `batches` of `n` samples; returns (acknowledged samples, sum of their values,
/// refusals with a retryable status).
fn send(url: &str, batches: std::ops::Range<i64>, n: i64) -> (u64, f64, usize) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let channel = tonic::transport::Channel::from_shared(url.to_string()).unwrap().connect().await.unwrap();
        let mut client = WriteClient::new(channel);
        let (mut acked, mut sum, mut refused) = (0, 0.0, 0);
        for b in batches {
            match client.write(request(b, n)).await {
                Ok(r) => {
                    let accepted = r.into_inner().accepted;
                    assert_eq!(accepted, n as u64);
                    acked += accepted;
                    sum += b as f64 * n as f64;
                }
                Err(s) if matches!(s.code(), Code::ResourceExhausted | Code::Unavailable) => refused += 1,
                Err(s) => panic!("write {b} failed: {s}"),
            }
        }
        (acked, sum, refused)
    })
}

fn count_and_sum(endpoint: &str, reader: &Path, url: &str) -> (u64, f64) {
    try_count_and_sum(endpoint, reader, url).unwrap_or_else(|e| panic!("{e}"))
}

/// [`count_and_sum`], or the error of the query (a compaction may delete a file the reader's
/// snapshot names: the query fails and a new one sees the compacted file).
fn try_count_and_sum(endpoint: &str, reader: &Path, url: &str) -> Result<(u64, f64), String> {
    let q = "SELECT count(*) AS n, sum(value) AS s FROM samples WHERE metric = 'objstore_probe'";
    let args = ["sql", "--data-dir", reader.to_str().unwrap(), "--data-url", url, "--format", "json", q];
    let out = lockstep_s3(endpoint, &args).output().unwrap();
    if !out.status.success() {
        return Err(format!("lockstep {args:?} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let row: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    Ok((row["n"].as_u64().unwrap(), row["s"].as_f64().unwrap_or(0.0)))
}

/// kill -9 of `serve --data-url` before any flush: a restart on the same local directory
/// replays the WAL; after its flush the data is in the bucket for a fresh reader.
#[test]
fn serve_killed_before_a_flush_recovers_from_the_wal_into_the_bucket() {
    let Some((moto, tmp)) = moto_and_tmp() else { return };
    let node = tmp.path().join("node");
    let url = "s3://lockstep/cluster-b/node-0";
    let server = Serve::start(&moto.endpoint, &node, url, &["--maintenance-interval-secs", "0"]);
    let (acked, sum, refused) = send(&server.url, 0..20, 500);
    assert_eq!((acked, refused), (10_000, 0));
    server.kill9();
    // Nothing was flushed: no data file in the bucket, the samples are only in the local WAL.
    assert!(!moto.keys("cluster-b/node-0/data/").iter().any(|k| k.ends_with(".parquet")));
    // A reader on the writer's directory sees them (it replays the WAL) ...
    assert_eq!(count_and_sum(&moto.endpoint, &node, url), (10_000, sum));
    // ... a reader elsewhere does not yet.
    assert_eq!(count_and_sum(&moto.endpoint, &tmp.path().join("elsewhere"), url).0, 0);
    let server = Serve::start(&moto.endpoint, &node, url, &["--maintenance-interval-secs", "0"]);
    server.stop();
    assert!(moto.keys("cluster-b/node-0/data/").iter().any(|k| k.ends_with(".parquet")));
    assert_eq!(count_and_sum(&moto.endpoint, &tmp.path().join("fresh"), url), (10_000, sum));
    // One new series later: its flush saves a catalog increment in the bucket, which a fresh
    // reader finds.
    let server = Serve::start(&moto.endpoint, &node, url, &["--maintenance-interval-secs", "0"]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let channel = tonic::transport::Channel::from_shared(server.url.clone()).unwrap().connect().await.unwrap();
        WriteClient::new(channel).write(request_of("objstore_more", 0, 500)).await.unwrap();
    });
    server.stop();
    // (The server's self-telemetry series are in the catalog too: the ids are not 4 and 5.)
    let increments = moto.keys("cluster-b/node-0/series/");
    assert!(!increments.is_empty(), "{increments:?}");
    let q = "SELECT host, count(*) AS n FROM samples WHERE metric = 'objstore_more' GROUP BY host";
    let fresh = tmp.path().join("fresh-2");
    let args = ["sql", "--data-dir", fresh.to_str().unwrap(), "--data-url", url, "--format", "csv", q];
    let out = lockstep_s3(&moto.endpoint, &args).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "host,n\nh0,500\n", "{}", String::from_utf8_lossy(&out.stderr));
}

/// A TCP relay to moto that the test can cut: "the bucket is unreachable" (moto itself keeps
/// running, so the bucket keeps its objects; restarting moto in memory would lose them).
struct Relay {
    port: u16,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Relay {
    fn start(upstream: u16) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Vec::new()));
        let (cut2, open2) = (cut.clone(), open.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(down) = conn else { continue };
                if cut2.load(Ordering::SeqCst) {
                    drop(down);
                    continue;
                }
                let Ok(up) = TcpStream::connect(("127.0.0.1", upstream)) else { continue };
                let mut list = open2.lock().unwrap();
                list.push(down.try_clone().unwrap());
                list.push(up.try_clone().unwrap());
                for (mut from, mut to) in [(down.try_clone().unwrap(), up.try_clone().unwrap()), (up, down)] {
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16384];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 || to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Relay { port, cut, open }
    }

    /// Cuts every open connection and refuses new ones (`true`), or lets them through again.
    fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
        if cut {
            for s in self.open.lock().unwrap().drain(..) {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

/// The bucket unreachable while `serve` runs: writes are still acknowledged (WAL + buffer),
/// flushes fail, and writes are refused with a retryable status only once the buffer is at its
/// limit; when the bucket is back the backlog lands and nothing acknowledged is missing.
#[test]
fn bucket_unreachable_acknowledged_writes_land_when_it_returns() {
    let Some((moto, tmp)) = moto_and_tmp() else { return };
    let relay = Relay::start(moto.endpoint.rsplit(':').next().unwrap().parse().unwrap());
    let via_relay = format!("http://127.0.0.1:{}", relay.port);
    let node = tmp.path().join("node");
    let url = "s3://lockstep/cluster-c/node-0";
    let extra = ["--flush-rows", "2000", "--maintenance-interval-secs", "1"];
    let server = Serve::start(&via_relay, &node, url, &extra);
    // Reachable: 4000 samples, flushed as they come.
    let (acked1, sum1, refused) = send(&server.url, 0..8, 500);
    assert_eq!((acked1, refused), (4000, 0));
    relay.set_cut(true);
    // Unreachable: the first writes are acknowledged (WAL fsync), then the buffer limit
    // (2 x flush rows) is reached and writes are refused with a retryable status.
    let (acked2, sum2, refused) = send(&server.url, 8..40, 500);
    eprintln!("while unreachable: {acked2} samples acknowledged, {refused} requests refused");
    assert!(acked2 >= 1500, "{acked2}");
    assert!(refused > 0, "no write was refused");
    relay.set_cut(false);
    // Reachable again: the maintenance thread's retry flushes the backlog; writes are taken.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (acked3, sum3) = loop {
        let (a, s, r) = send(&server.url, 40..41, 500);
        if r == 0 {
            break (a, s);
        }
        assert!(Instant::now() < deadline, "writes still refused a minute after the bucket came back");
        std::thread::sleep(Duration::from_millis(500));
    };
    server.stop();
    let total = acked1 + acked2 + acked3;
    assert_eq!(count_and_sum(&moto.endpoint, &tmp.path().join("fresh"), url), (total, sum1 + sum2 + sum3));
}

/// Copies the rows of a bundle's Parquet file (`samples.parquet`, `clock_sync.parquet`) whose
/// `host` passes `keep` to `out`; returns the rows kept.
fn filter_by_host(file: &Path, out: &Path, keep: &dyn Fn(&str) -> bool) -> usize {
    use arrow::array::{Array, AsArray, BooleanArray, RecordBatchReader};
    use parquet::arrow::ArrowWriter;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(file).unwrap()).unwrap().build().unwrap();
    let mut writer = ArrowWriter::try_new(std::fs::File::create(out).unwrap(), reader.schema(), None).unwrap();
    let mut kept = 0;
    for batch in reader {
        let batch = batch.unwrap();
        let host =
            arrow::compute::cast(batch.column_by_name("host").unwrap(), &arrow::datatypes::DataType::Utf8).unwrap();
        let host = host.as_string::<i32>();
        let mask: BooleanArray = (0..host.len()).map(|i| Some(keep(host.value(i)))).collect();
        let batch = arrow::compute::filter_record_batch(&batch, &mask).unwrap();
        kept += batch.num_rows();
        writer.write(&batch).unwrap();
    }
    writer.close().unwrap();
    kept
}

/// The bundle `src` cut in two by host (sharding by host, as two ingest nodes' collectors
/// would send it): `dst[k]` gets the samples and clock exchanges of the hosts of shard `k` and
/// the whole topology and job list.
pub(super) fn split_bundle(src: &Path, dst: [&Path; 2]) {
    let shard = |host: &str| host.bytes().map(usize::from).sum::<usize>() % 2;
    for (k, out) in dst.iter().enumerate() {
        std::fs::create_dir_all(out).unwrap();
        for doc in ["topology.json", "jobs.json"] {
            std::fs::copy(src.join(doc), out.join(doc)).unwrap();
        }
        for file in ["samples.parquet", "clock_sync.parquet"] {
            let rows = filter_by_host(&src.join(file), &out.join(file), &|h| shard(h) == k);
            assert!(rows > 0, "shard {k} of {file} is empty");
        }
    }
}

/// JSON lines of two query results equal, floats to 1e-9 relative (the union sums the same
/// values in another order than one store does).
fn assert_same_rows(got: &str, want: &str, what: &str) {
    fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
        use serde_json::Value::*;
        match (a, b) {
            (Number(x), Number(y)) => match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-9 * x.abs().max(y.abs()),
                _ => x == y,
            },
            (Object(x), Object(y)) => x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w))),
            (Array(x), Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same(v, w)),
            _ => a == b,
        }
    }
    let parse = |s: &str| -> Vec<serde_json::Value> { s.lines().map(|l| serde_json::from_str(l).unwrap()).collect() };
    let (g, w) = (parse(got), parse(want));
    assert!(!w.is_empty(), "{what}: no rows");
    assert!(g.len() == w.len() && g.iter().zip(&w).all(|(a, b)| same(a, b)), "{what}:\n got {got}\nwant {want}");
}

const UNION_QUERIES: [&str; 9] = [
    "SELECT count(*) AS n, sum(value) AS s, min(time) AS t0, max(time) AS t1, count(DISTINCT series_id) AS series FROM samples",
    "SELECT host, count(*) AS n, sum(value) AS s, max(value) AS hi, min(time) AS t0 FROM samples GROUP BY host ORDER BY host",
    "SELECT metric, quantile_cont(value, 0.9) AS q90, count(*) AS n FROM samples GROUP BY metric ORDER BY metric",
    "SELECT r['lag_ns'] AS lag_ns, r['coef'] AS coef, r['n'] AS n FROM (SELECT lag_corr(b, x, y, INTERVAL '30 seconds') AS r \
     FROM (SELECT date_bin(INTERVAL '1 second', time) AS b, \
     avg(CASE WHEN metric = 'node_infiniband_port_transmit_wait_total' THEN value END) AS x, \
     avg(CASE WHEN metric = 'train_step_duration_seconds' THEN value END) AS y FROM samples GROUP BY b))",
    "SELECT t.role, count(*) AS n FROM samples s JOIN topology_nodes t ON s.host = t.node GROUP BY t.role ORDER BY t.role",
    "SELECT count(*) AS n, count(DISTINCT host) AS hosts FROM samples WHERE gpu IS NOT NULL",
    "SELECT count(*) AS n FROM jobs",
    "SELECT count(*) AS n, count(DISTINCT host) AS hosts FROM clock_models",
    "SELECT host, max(time_uncertainty) AS u FROM samples WHERE time_uncertainty IS NOT NULL GROUP BY host ORDER BY host",
];

/// Two ingest nodes (`import` processes running at once) write disjoint hosts of one simulated
/// job under their own prefixes of one dataset; a reader given the dataset root sees the union:
/// the same SQL and the same diagnosis as one local store that imported everything.
#[test]
fn two_nodes_one_dataset_reader_sees_the_union() {
    let Some((moto, tmp)) = moto_and_tmp() else { return };
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let bundle = tmp.path().join("bundle");
    super::ok(&["simulate", "--out", &s(&bundle), "--nodes", "4", "--minutes", "3", "--scenario", "storage-latency"]);
    let (b0, b1) = (tmp.path().join("bundle-0"), tmp.path().join("bundle-1"));
    split_bundle(&bundle, [&b0, &b1]);
    let local = tmp.path().join("local");
    super::ok(&["import", "--data-dir", &s(&local), &s(&bundle)]);
    let root = "s3://lockstep/cluster-d";
    let imports: Vec<Child> = [(&b0, "node-0"), (&b1, "node-1")]
        .into_iter()
        .map(|(b, node)| {
            let dir = tmp.path().join(format!("local-{node}"));
            let url = format!("{root}/{node}");
            lockstep_s3(&moto.endpoint, &["import", "--data-dir", &s(&dir), "--data-url", &url, &s(b)])
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in imports {
        assert!(child.wait().unwrap().success());
    }
    let keys = moto.keys("cluster-d/");
    for node in ["node-0", "node-1"] {
        for k in ["manifest.json", "series.json", "writer-lease.json", "topology.json"] {
            assert!(keys.contains(&format!("cluster-d/{node}/{k}")), "{node}/{k} not in {keys:?}");
        }
        assert!(keys.iter().any(|k| k.starts_with(&format!("cluster-d/{node}/clock/"))), "{keys:?}");
    }
    assert!(!keys.contains(&"cluster-d/manifest.json".to_string()));
    let reader = tmp.path().join("reader");
    for q in UNION_QUERIES {
        let want = super::ok(&["sql", "--data-dir", &s(&local), "--format", "json", q]);
        let got = ok_s3(&moto.endpoint, &["sql", "--data-dir", &s(&reader), "--data-url", root, "--format", "json", q]);
        assert_same_rows(&got, &want, q);
    }
    // Each node alone holds only its hosts.
    let hosts = |url: &str| {
        let q = "SELECT count(DISTINCT host) AS h FROM samples";
        let out = ok_s3(&moto.endpoint, &["sql", "--data-dir", &s(&reader), "--data-url", url, "--format", "json", q]);
        serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()["h"].as_u64().unwrap()
    };
    let (h0, h1, all) = (hosts(&format!("{root}/node-0")), hosts(&format!("{root}/node-1")), hosts(root));
    assert!(h0 > 0 && h1 > 0 && h0 + h1 == all, "{h0} + {h1} != {all}");
    // The diagnosis over the dataset is the diagnosis of one node with all the data.
    assert_same_diagnosis(&moto.endpoint, &local, &reader, root);
}

impl Serve {
    /// Starts `serve`, or returns what it printed when it exited instead.
    fn try_start(endpoint: &str, data_dir: &Path, data_url: &str, extra: &[&str]) -> Result<Serve, String> {
        let mut args = vec!["serve", "--data-dir", data_dir.to_str().unwrap(), "--data-url", data_url];
        args.extend_from_slice(&["--listen", "127.0.0.1:0", "--insecure"]);
        args.extend_from_slice(extra);
        let mut child = lockstep_s3(endpoint, &args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        match line.strip_prefix("listening on ").and_then(|r| r.split_whitespace().next()) {
            Some(addr) => Ok(Serve { url: format!("http://{addr}"), child }),
            None => {
                let mut err = String::new();
                child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
                let _ = child.wait();
                Err(format!("{line}{err}"))
            }
        }
    }
}

/// The writer lease: a second writer on a node's prefix is refused while the node lives; after
/// a kill -9 the node restarted on its own data directory takes over at once (from its WAL),
/// and a replacement on another machine (another data directory) takes over once the lease
/// expires (from the bucket). Nothing acknowledged is lost.
#[test]
fn lease_refuses_a_second_writer_and_a_dead_node_is_replaced() {
    let Some((moto, tmp)) = moto_and_tmp() else { return };
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let url = "s3://lockstep/cluster-e/node-0";
    let (a, b, c) = (tmp.path().join("a"), tmp.path().join("b"), tmp.path().join("c"));
    let ttl = ["--lease-ttl-secs", "2", "--maintenance-interval-secs", "0"];
    let server = Serve::start(&moto.endpoint, &a, url, &ttl);
    let (acked1, sum1, _) = send(&server.url, 0..10, 500);
    assert_eq!(acked1, 5000);
    // A second writer on the prefix (another data directory, as another machine) is refused.
    let bundle = tmp.path().join("bundle");
    super::make_bundle(&bundle);
    let out = lockstep_s3(&moto.endpoint, &["import", "--data-dir", &s(&b), "--data-url", url, &s(&bundle)])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a second writer was let in");
    assert!(err.contains("is written by another node") && err.contains("writer-lease.json"), "{err}");
    let refused = Serve::try_start(&moto.endpoint, &b, url, &ttl).err().unwrap_or_default();
    assert!(refused.contains("is written by another node"), "{refused}");
    // kill -9 before any flush: the samples are only in a's WAL.
    server.kill9();
    assert!(!moto.keys("cluster-e/node-0/data/").iter().any(|k| k.ends_with(".parquet")));
    // The node restarted on its own data directory takes its lease over at once and replays
    // its WAL; with small flushes the next writes reach the bucket.
    let server = Serve::start(&moto.endpoint, &a, url, &["--lease-ttl-secs", "2", "--flush-rows", "500"]);
    let (acked2, sum2, _) = send(&server.url, 10..20, 500);
    assert_eq!(acked2, 5000);
    let fresh = |name: &str| tmp.path().join(name);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut attempt = 0;
    loop {
        let got = try_count_and_sum(&moto.endpoint, &fresh(&format!("r{attempt}")), url);
        if got == Ok((acked1 + acked2, sum1 + sum2)) {
            break;
        }
        assert!(Instant::now() < deadline, "acknowledged writes did not reach the bucket: {got:?}");
        // Rows below --flush-rows stay buffered: a write of another metric flushes them.
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let channel = tonic::transport::Channel::from_shared(server.url.clone()).unwrap().connect().await.unwrap();
            WriteClient::new(channel).write(request_of("objstore_nudge", 100 + attempt, 500)).await.unwrap();
        });
        attempt += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    server.kill9();
    // A replacement elsewhere is refused until the dead node's lease expires, then takes over
    // from what the bucket's manifest names.
    let deadline = Instant::now() + Duration::from_secs(60);
    let server = loop {
        match Serve::try_start(&moto.endpoint, &c, url, &ttl) {
            Ok(server) => break server,
            Err(e) => {
                assert!(e.contains("is written by another node"), "{e}");
                assert!(Instant::now() < deadline, "the lease of a dead node never expired");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    let (acked3, sum3, _) = send(&server.url, 20..30, 500);
    server.stop();
    let total = (acked1 + acked2 + acked3, sum1 + sum2 + sum3);
    assert_eq!(count_and_sum(&moto.endpoint, &fresh("final"), url), total);
    // The clean stop released the lease: the next writer (a) gets it at once.
    let server = Serve::start(&moto.endpoint, &a, url, &ttl);
    server.stop();
    let lease = moto.boto3(
        &[],
        "print(s3.get_object(Bucket='lockstep', Key='cluster-e/node-0/writer-lease.json')['Body'].read().decode())",
    );
    assert!(lease.contains("\"released\":true"), "{lease}");
}

/// A plain-HTTP endpoint without `AWS_ALLOW_HTTP=true` is refused at open with what to set (the
/// client said only "builder error", at the first request).
#[test]
fn a_plain_http_endpoint_needs_aws_allow_http() {
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("local");
    let out = lockstep_s3("http://127.0.0.1:9", &["sql", "--data-dir", local.to_str().unwrap()])
        .args(["--data-url", "s3://bucket/prefix", "SELECT 1"])
        .env_remove("AWS_ALLOW_HTTP")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("the endpoint http://127.0.0.1:9 is plain HTTP: set AWS_ALLOW_HTTP=true"), "{err}");
}
