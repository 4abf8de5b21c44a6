//! Retention's retirement of series with real processes: `lockstep serve --retention` retires
//! a pod whose samples all expired, while readers beside it (`lockstep sql`, a long-lived
//! `lockstep worker`) and after it answer as one process would.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::distributed::Worker;
use super::ok;
use super::serve::{ServerProc, sql_json};

const HOUR_NS: i64 = 3_600_000_000_000;

fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64
}

/// Waits (bounded) until the store's catalog snapshot is version 3: a retirement was saved.
fn wait_for_retirement(db: &Path) {
    let catalog = db.join("series.json");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !std::fs::read_to_string(&catalog).unwrap().starts_with(r#"{"version":3,"#) {
        assert!(Instant::now() < deadline, "no retirement: {}", std::fs::read_to_string(&catalog).unwrap());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Pod churn under `serve --retention`: a pod whose samples are all older than the retention
/// is retired from the catalog by the server's maintenance (its `series.json` becomes version
/// 3), while the other pod stays. Processes opened before (`sql`), beside the server after the
/// retirement (`sql`), and after it stopped (`sql`, `check`) all name the live pod right.
#[test]
fn serve_retention_retires_series_of_expired_pods() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    let now = now_ns();
    let (old, recent) = (now - 3 * 86_400_000_000_000, now - 600_000_000_000);
    let csv =
        format!("time,host,metric,value,pod\n{old},n1,util,1,gone\n{old},n1,util,2,kept\n{recent},n1,util,3,kept\n");
    std::fs::write(bundle.join("samples.csv"), csv).unwrap();
    let db = tmp.path().join("db");
    let dbs = db.to_str().unwrap();
    ok(&["import", "--data-dir", dbs, bundle.to_str().unwrap()]);
    let pods = |db: &Path| -> Vec<(String, i64)> {
        sql_json(db, "SELECT CAST(pod AS VARCHAR) AS pod, CAST(value AS BIGINT) AS v FROM samples WHERE metric = 'util' ORDER BY 1, 2")
            .iter()
            .map(|r| (r["pod"].as_str().unwrap().to_string(), r["v"].as_i64().unwrap()))
            .collect()
    };
    let all = vec![("gone".to_string(), 1), ("kept".to_string(), 2), ("kept".to_string(), 3)];
    assert_eq!(pods(&db), all, "before");
    let server = ServerProc::start(&db, &["--insecure", "--retention", "1d", "--maintenance-interval-secs", "1"]);
    wait_for_retirement(&db);
    let live = vec![("kept".to_string(), 3)];
    assert_eq!(pods(&db), live, "a reader beside the server");
    server.stop();
    assert_eq!(pods(&db), live, "a reader after");
    let check = ok(&["check", "--data-dir", dbs]);
    assert!(check.contains("no problems found"), "{check}");
    let text = std::fs::read_to_string(db.join("series.json")).unwrap();
    assert!(text.contains(r#""retired":[[0,1]]"#) && !text.contains("gone"), "{text}");
}

/// A reader process open across a retirement and a retired key written again: two `lockstep
/// worker` processes opened on the store before `serve --retention` retired a pod answer for
/// `lockstep sql --workers` (the statement cut into stages that run on them) before the
/// retirement, after it (their snapshots still name the retired id), and after the pod was
/// imported again under a new id their snapshots lack: each time as one process answers.
#[test]
fn workers_open_across_a_retirement_answer_as_one_process() {
    let tmp = tempfile::tempdir().unwrap();
    let now = now_ns();
    let old = now - 3 * 24 * HOUR_NS;
    // `kept` has a sample in each of the last 10 hours (10 files: enough scan units to cut).
    let mut csv = format!("time,host,metric,value,pod\n{old},n1,util,1000,gone\n{old},n1,util,100,kept\n");
    for h in 1..=10 {
        csv.push_str(&format!("{},n1,util,{h},kept\n", now - h * HOUR_NS));
    }
    let bundle = |name: &str, csv: &str| {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("samples.csv"), csv).unwrap();
        dir.to_str().unwrap().to_string()
    };
    let db = tmp.path().join("db");
    let dbs = db.to_str().unwrap();
    ok(&["import", "--data-dir", dbs, &bundle("first", &csv)]);
    let (a, b) = (Worker::start(&["--data-dir", dbs], None), Worker::start(&["--data-dir", dbs], None));
    let workers = format!("{},{}", a.addr, b.addr);
    let query = "SELECT CAST(pod AS VARCHAR) AS pod, count(*) AS n, CAST(max(value) AS BIGINT) AS hi \
                 FROM samples WHERE metric = 'util' GROUP BY pod ORDER BY pod";
    let answer = |when: &str| -> Vec<(String, i64, i64)> {
        let here = sql_json(&db, query);
        let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
            .args(["sql", "--data-dir", dbs, "--format", "json", "--workers", &workers, "--rows-per-task", "1", query])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && !stderr.contains("runs in this process"), "{when}: {stderr}");
        let there: Vec<serde_json::Value> =
            String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(there, here, "{when}: the workers against one process");
        here.iter()
            .map(|r| (r["pod"].as_str().unwrap().to_string(), r["n"].as_i64().unwrap(), r["hi"].as_i64().unwrap()))
            .collect()
    };
    let row = |pod: &str, n, hi| (pod.to_string(), n, hi);
    assert_eq!(answer("before"), [row("gone", 1, 1000), row("kept", 11, 100)]);
    let server = ServerProc::start(&db, &["--insecure", "--retention", "1d", "--maintenance-interval-secs", "1"]);
    wait_for_retirement(&db);
    assert_eq!(answer("beside the server after the retirement"), [row("kept", 10, 10)]);
    server.stop();
    assert_eq!(answer("after the server stopped"), [row("kept", 10, 10)]);
    ok(&[
        "import",
        "--data-dir",
        dbs,
        &bundle("again", &format!("time,host,metric,value,pod\n{},n1,util,7,gone\n", now - HOUR_NS / 2)),
    ]);
    assert_eq!(answer("written again"), [row("gone", 1, 7), row("kept", 10, 10)]);
    let text = std::fs::read_to_string(db.join("series.json")).unwrap();
    assert!(text.contains(r#""retired":[[0,1]]"#), "{text}");
    for mut w in [a, b] {
        assert!(w.child.try_wait().unwrap().is_none(), "a worker exited");
        w.kill();
    }
}
