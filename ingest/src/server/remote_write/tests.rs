//! A real server with the HTTP listener on 127.0.0.1:0 and hand-made HTTP/1.1 requests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use lockstep_engine::store::ScanRequest;
use lockstep_engine::{Store, StoreConfig};

use super::*;
use crate::server::convert::Write;
use crate::server::http::http_status;
use crate::server::http::testing::{self, READ_TOKEN, TOKEN, start, start_with};
use hyper::StatusCode;
use tonic::Code;

/// 2026-01-01T00:00:00Z in milliseconds.
const T_MS: i64 = 1_767_225_600_000;

fn label(name: &str, value: &str) -> PromLabel {
    PromLabel { name: name.as_bytes().to_vec().into(), value: value.as_bytes().to_vec().into() }
}

fn series(labels: &[(&str, &str)], samples: &[(i64, f64)]) -> PromTimeSeries {
    PromTimeSeries {
        labels: labels.iter().map(|(n, v)| label(n, v)).collect(),
        samples: samples.iter().map(|&(timestamp, value)| PromSample { value, timestamp }).collect(),
        histograms: Vec::new(),
    }
}

fn body(req: &PromWriteRequest) -> Vec<u8> {
    snap::raw::Encoder::new().compress_vec(&prost::Message::encode_to_vec(req)).unwrap()
}

/// Posts `body` to the remote-write path and returns (status code, response body).
async fn post(addr: &str, token: Option<&str>, content_type: &str, body: &[u8]) -> (u16, String) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![
        ("Content-Type", content_type),
        ("Content-Encoding", "snappy"),
        ("X-Prometheus-Remote-Write-Version", "0.1.0"),
    ];
    if let Some(a) = &auth {
        headers.push(("Authorization", a));
    }
    let answer = testing::post(addr, WRITE_PATH, &headers, body).await;
    (answer.code, String::from_utf8_lossy(&answer.body).to_string())
}

const V1: &str = "application/x-protobuf";

/// Samples of `metric` in the store: (labels as `k=v,...`, time ns, value).
fn read(store: &Store, metric: &str) -> Vec<(String, i64, f64)> {
    let rows = store.scan_all(ScanRequest::default()).unwrap();
    let mut out = Vec::new();
    for i in 0..rows.len() {
        let key = store.series_key(rows.series[i]).unwrap().unwrap();
        if key.metric == metric {
            let labels = key.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
            out.push((labels, rows.time[i], rows.value[i]));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_write_round_trip_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), StoreConfig { max_future_ns: None, ..Default::default() }).unwrap());
    let (addr, stop, task) = start(store.clone()).await;

    let stale = f64::from_bits(STALE_NAN_BITS);
    let req = PromWriteRequest {
        timeseries: vec![
            series(
                &[("__name__", "up"), ("instance", "node-1:9100"), ("job", "node")],
                &[(T_MS, 1.0), (T_MS + 1000, stale), (T_MS + 2000, 0.0)],
            ),
            series(&[("__name__", "gpu_util"), ("host", "gpu-7"), ("instance", "x:1"), ("time", "t")], &[(T_MS, 93.5)]),
            // Only a stale marker: nothing to write, not an error.
            series(&[("__name__", "gone"), ("instance", "[::1]:9090")], &[(T_MS, stale)]),
        ],
    };
    let (code, text) = post(&addr, Some(TOKEN), V1, &body(&req)).await;
    assert_eq!(code, 204, "{text}");
    // Acknowledged means durable and readable.
    assert_eq!(
        read(&store, "up"),
        vec![
            ("host=node-1,instance=node-1:9100,job=node".to_string(), T_MS * 1_000_000, 1.0),
            ("host=node-1,instance=node-1:9100,job=node".to_string(), (T_MS + 2000) * 1_000_000, 0.0),
        ]
    );
    assert_eq!(
        read(&store, "gpu_util"),
        vec![("host=gpu-7,instance=x:1,prom_time=t".to_string(), T_MS * 1_000_000, 93.5)]
    );
    assert!(read(&store, "gone").is_empty());

    // Auth: no token, a wrong token, a read-only token.
    assert_eq!(post(&addr, None, V1, &body(&req)).await.0, 401);
    assert_eq!(post(&addr, Some("wrong-token-0123456789abcdef"), V1, &body(&req)).await.0, 401);
    assert_eq!(post(&addr, Some(READ_TOKEN), V1, &body(&req)).await.0, 403);

    // Garbage: not snappy; snappy but not protobuf.
    let (code, text) = post(&addr, Some(TOKEN), V1, b"\xff\xff\xff\xff\xff\xff garbage").await;
    assert_eq!(code, 400, "{text}");
    let junk = snap::raw::Encoder::new().compress_vec(b"\x0a\xff\xff\xff\xff\x0f").unwrap();
    let (code, text) = post(&addr, Some(TOKEN), V1, &junk).await;
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("malformed"), "{text}");

    // An unknown message is refused with 415 (a sender may fall back to another).
    let (code, text) =
        post(&addr, Some(TOKEN), "application/x-protobuf;proto=io.prometheus.write.v3.Request", &body(&req)).await;
    assert_eq!(code, 415, "{text}");

    // A series without host or instance: 400 with a reason, the valid series still written.
    let req = PromWriteRequest {
        timeseries: vec![
            series(&[("__name__", "nohost"), ("job", "x")], &[(T_MS, 1.0)]),
            series(&[("__name__", "withhost"), ("instance", "h2")], &[(T_MS, 2.0)]),
        ],
    };
    let (code, text) = post(&addr, Some(TOKEN), V1, &body(&req)).await;
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("1 samples accepted") && text.contains("no host or instance label"), "{text}");
    assert_eq!(read(&store, "withhost").len(), 1);
    // An instance without a host part is named as such (QA pass 23a: "no host or instance label").
    let req =
        PromWriteRequest { timeseries: vec![series(&[("__name__", "porty"), ("instance", ":9100")], &[(T_MS, 1.0)])] };
    let (code, text) = post(&addr, Some(TOKEN), V1, &body(&req)).await;
    assert_eq!(code, 400, "{text}");
    assert!(text.contains(r#"its instance label ":9100" has no host part"#), "{text}");

    // Wrong path and method.
    let answer = testing::request(&addr, "GET", WRITE_PATH, &[], b"").await;
    assert_eq!(answer.code, 405);
    assert!(answer.head.contains("allow: post"), "{}", answer.head);
    assert_eq!(testing::request(&addr, "POST", "/api/v2/write", &[], b"").await.code, 404);

    drop(stop);
    task.await.unwrap();
}

/// Under a memory limit, request bodies in flight share a quarter of it (QA pass 23a: 100
/// bodies of 60 MiB at once took a server with a 256 MiB limit to 3.7 GiB): a body that does
/// not fit beside those being read is refused as busy (503, Retry-After), one larger than the
/// whole budget as too large (413), and what a request held is free once it is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_in_flight_share_a_quarter_of_the_memory_limit() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), StoreConfig::default()).unwrap());
    let (addr, stop, task) = start_with(store.clone(), |options| {
        options.tokens = None;
        options.config.limits.memory_limit_bytes = Some(32 << 20);
        options.config.limits.admission_wait = std::time::Duration::from_millis(300);
    })
    .await;
    // A client that declared 30 MiB and sent 1 KiB holds 1 KiB; one that sent 6 MiB of its 7
    // holds 6 of the budget's 8 MiB.
    let head = |length: usize| {
        format!(
            "POST {WRITE_PATH} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {V1}\r\nContent-Encoding: snappy\r\n\
             Content-Length: {length}\r\n\r\n"
        )
    };
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(head(30 << 20).as_bytes()).await.unwrap();
    slow.write_all(&[0u8; 1024]).await.unwrap();
    let mut large = tokio::net::TcpStream::connect(&addr).await.unwrap();
    large.write_all(head(7 << 20).as_bytes()).await.unwrap();
    large.write_all(&vec![0u8; 6 << 20]).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // A small write still fits and is stored.
    let one = PromWriteRequest { timeseries: vec![series(&[("__name__", "m"), ("host", "h")], &[(T_MS, 1.0)])] };
    let (code, text) = post(&addr, None, V1, &body(&one)).await;
    assert_eq!(code, 204, "{text}");
    // A body of `length` bytes sent until the answer comes, and the answer.
    let send = |length: usize| {
        let (addr, head) = (addr.clone(), head(length));
        async move {
            let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
            stream.write_all(head.as_bytes()).await.unwrap();
            // The server stops reading when it refuses: what it did not read is not waited for.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), stream.write_all(&vec![0u8; length])).await;
            let mut answer = Vec::new();
            let _ = stream.read_to_end(&mut answer).await;
            String::from_utf8_lossy(&answer).to_ascii_lowercase()
        }
    };
    // 4 MiB does not fit beside them: busy, retryable.
    let answer = send(4 << 20).await;
    assert!(answer.starts_with("http/1.1 503"), "{answer}");
    assert!(answer.contains("retry-after"), "{answer}");
    assert!(answer.contains("server busy: request bodies of"), "{answer}");
    // 10 MiB never fits: refused as declared.
    let answer = send(10 << 20).await;
    assert!(answer.starts_with("http/1.1 413"), "{answer}");
    assert!(answer.contains("more than the server takes in at once: 8 mib"), "{answer}");
    // The slow client gives up: its 6 MiB are free again, and the 4 MiB body is read (and
    // found not to be snappy).
    drop((slow, large));
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let (code, text) = post(&addr, None, V1, &vec![0u8; 4 << 20]).await;
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("not snappy"), "{text}");
    assert_eq!(read(&store, "m").len(), 1);
    drop(stop);
    task.await.unwrap();
}

#[tokio::test]
async fn oversized_bodies_are_413() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), StoreConfig::default()).unwrap());
    let (addr, stop, task) = start_with(store.clone(), |options| {
        options.tokens = None;
        options.config.limits.max_message_bytes = 1000;
        options.config.limits.max_series_per_request = 2;
    })
    .await;
    // Compressed body over the limit.
    let (code, _) = post(&addr, None, V1, &vec![0u8; 5000]).await;
    assert_eq!(code, 413);
    // Small compressed body claiming a large decompressed size.
    // (The snappy block header is the varint of the decompressed length: 100 000 here.)
    let bomb = [0xa0, 0x8d, 0x06, 0x00];
    assert_eq!(snap::raw::decompress_len(&bomb).unwrap(), 100_000);
    let (code, text) = post(&addr, None, V1, &bomb).await;
    assert_eq!(code, 413, "{text}");
    // More series than max_series_per_request: 400, nothing written.
    let three = PromWriteRequest {
        timeseries: (0..3).map(|i| series(&[("__name__", "m"), ("host", &format!("h{i}"))], &[(T_MS, 1.0)])).collect(),
    };
    let (code, text) = post(&addr, None, V1, &body(&three)).await;
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("3 series; the limit is 2"), "{text}");
    assert!(read(&store, "m").is_empty());
    drop(stop);
    task.await.unwrap();
}

#[test]
fn instance_to_host() {
    assert_eq!(host_of_instance("node-1:9100"), "node-1");
    assert_eq!(host_of_instance("node-1"), "node-1");
    assert_eq!(host_of_instance("10.0.0.1:80"), "10.0.0.1");
    assert_eq!(host_of_instance("[::1]:9090"), "::1");
    assert_eq!(host_of_instance("fe80::1"), "fe80::1");
    assert_eq!(host_of_instance("http://x"), "http://x");
}

#[test]
fn overload_is_503_with_retry_after_and_server_errors_are_500() {
    let r = http_status(&crate::server::status::retryable(Code::ResourceExhausted, "server busy", 250), 250);
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers().get(header::RETRY_AFTER).unwrap(), "1");
    let r = http_status(&Status::unavailable("store closed"), 2500);
    assert_eq!(
        (r.status(), r.headers().get(header::RETRY_AFTER).unwrap().to_str().unwrap()),
        (StatusCode::SERVICE_UNAVAILABLE, "3")
    );
    let path = std::path::PathBuf::from("/srv/secret-store/wal/1.wal");
    let status =
        crate::server::status::engine_status(&lockstep_engine::Error::io(&path, std::io::Error::other("disk")), 1);
    let r = http_status(&status, 1);
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(r.headers().get(header::RETRY_AFTER).is_none());
    assert_eq!(http_status(&Status::invalid_argument("x"), 1).status(), StatusCode::BAD_REQUEST);
    assert_eq!(http_status(&Status::out_of_range("x"), 1).status(), StatusCode::PAYLOAD_TOO_LARGE);
}

/// Arbitrary bytes, truncations and bit flips of a valid body: an error or a conversion,
/// never a panic.
#[test]
fn hostile_bodies_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig { max_future_ns: None, ..Default::default() }).unwrap();
    let limits = crate::server::Limits::default();
    let req = PromWriteRequest {
        timeseries: vec![
            series(&[("__name__", "up"), ("instance", "[::1]:9090"), ("job", "j")], &[(T_MS, 1.0), (i64::MAX, 2.0)]),
            series(&[("__name__", "x"), ("host", "h"), ("value", "v")], &[(i64::MIN, f64::NAN), (T_MS, 3.0)]),
        ],
    };
    let valid = prost::Message::encode_to_vec(&req);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut converted = 0;
    for round in 0..3000 {
        let raw: Vec<u8> = match round % 3 {
            0 => (0..next() % 200).map(|_| next() as u8).collect(),
            1 => valid[..(next() as usize % (valid.len() + 1))].to_vec(),
            _ => {
                let mut v = valid.clone();
                let i = next() as usize % v.len();
                v[i] ^= 1 << (next() % 8);
                v
            }
        };
        // Both as snappy-compressed protobuf and as raw bytes claimed to be snappy.
        for body in [snap::raw::Encoder::new().compress_vec(&raw).unwrap(), raw] {
            for version in [Version::V1, Version::V2] {
                if let Ok(decoded) = decode(&body, 1 << 20, version)
                    && convert(&store, &SeriesCache::default(), decoded, &limits).is_ok()
                {
                    converted += 1;
                }
            }
        }
    }
    assert!(converted > 0);
    // The valid request: `up` gets host ::1; the i64::MAX ms timestamp is rejected, the NaN dropped.
    let c = convert(
        &store,
        &SeriesCache::default(),
        decode(&snap::raw::Encoder::new().compress_vec(&valid).unwrap(), 1 << 20, Version::V1).unwrap(),
        &limits,
    )
    .unwrap();
    assert_eq!(c.batch.series.len(), 2);
    assert_eq!(c.batch.series[0].0.labels.get("host").map(|v| v.as_str()), Some("::1"));
    assert_eq!(c.batch.series[1].0.labels.get("prom_value").map(|v| v.as_str()), Some("v"));
    assert_eq!((c.rejected, c.dropped), (1, 1), "{:?}", c.by_reason);
}

/// Remote write 2.0 (symbol table) with a float series and native histograms (integer with a
/// gap between spans, float, and one with non-whole counts): the series are the documented
/// `_bucket{le}`/`_count`/`_sum`, the response names what was written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_write_2_and_native_histograms() {
    use native::{BucketSpan, PromHistogram, V2Request, V2TimeSeries};
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), StoreConfig { max_future_ns: None, ..Default::default() }).unwrap());
    let (addr, stop, task) = start(store.clone()).await;
    let symbols: Vec<Bytes> =
        ["", "__name__", "up", "instance", "n1:9100", "job", "node", "lat_seconds", "lat_float", "lat_bad"]
            .map(|s: &'static str| Bytes::from_static(s.as_bytes()))
            .to_vec();
    let integer = PromHistogram {
        count_int: Some(7),
        sum: 20.0,
        schema: 0,
        zero_threshold: 0.001,
        zero_count_int: Some(1),
        // Indexes 0, 1 and 3 (bounds 1, 2, 8), counts 2, 3, 1 delta-coded.
        positive_spans: vec![BucketSpan { offset: 0, length: 2 }, BucketSpan { offset: 1, length: 1 }],
        positive_deltas: vec![2, 1, -2],
        timestamp: T_MS,
        ..Default::default()
    };
    let float = PromHistogram {
        count_float: Some(3.0),
        sum: 1.5,
        schema: 0,
        positive_spans: vec![BucketSpan { offset: -1, length: 2 }],
        positive_counts: vec![1.0, 2.0],
        timestamp: T_MS,
        ..Default::default()
    };
    let bad = PromHistogram { count_float: Some(1.5), positive_counts: vec![1.5], ..float.clone() };
    let series = |name: u32, samples: Vec<PromSample>, histograms: Vec<PromHistogram>| V2TimeSeries {
        labels_refs: vec![1, name, 3, 4, 5, 6],
        samples,
        histograms,
    };
    let req = V2Request {
        symbols,
        timeseries: vec![
            series(2, vec![PromSample { value: 1.0, timestamp: T_MS }], vec![]),
            series(7, vec![], vec![integer]),
            series(8, vec![], vec![float]),
        ],
    };
    let v2 = "application/x-protobuf;proto=io.prometheus.write.v2.Request";
    let compressed = snap::raw::Encoder::new().compress_vec(&prost::Message::encode_to_vec(&req)).unwrap();
    let answer = testing::post(
        &addr,
        WRITE_PATH,
        &[("Content-Type", v2), ("Content-Encoding", "snappy"), ("Authorization", &format!("Bearer {TOKEN}"))],
        &compressed,
    )
    .await;
    assert_eq!(answer.code, 204, "{}", String::from_utf8_lossy(&answer.body));
    assert!(answer.head.contains("x-prometheus-remote-write-histograms-written: 2"), "{}", answer.head);
    assert!(
        answer.head.lines().any(|l| l.trim() == "x-prometheus-remote-write-samples-written: 1"),
        "float samples only: {}",
        answer.head
    );
    assert_eq!(read(&store, "up").len(), 1);
    let le = |metric: &str| -> Vec<(String, f64)> {
        let mut v: Vec<(String, f64)> = read(&store, metric)
            .into_iter()
            .map(|(labels, _, value)| {
                let le = labels.split(',').find_map(|kv| kv.strip_prefix("le=")).unwrap_or("").to_string();
                (le, value)
            })
            .collect();
        v.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        v
    };
    let expect = |pairs: &[(&str, f64)]| pairs.iter().map(|(l, v)| (l.to_string(), *v)).collect::<Vec<_>>();
    assert_eq!(
        le("lat_seconds_bucket"),
        expect(&[("0.001", 1.0), ("1", 3.0), ("2", 6.0), ("4", 6.0), ("+Inf", 7.0), ("8", 7.0)])
    );
    assert_eq!(read(&store, "lat_seconds_count")[0].2, 7.0);
    assert_eq!(read(&store, "lat_seconds_sum")[0].2, 20.0);
    assert_eq!(read(&store, "lat_seconds_sum")[0].0, "host=n1,instance=n1:9100,job=node");
    assert_eq!(le("lat_float_bucket"), expect(&[("0", 0.0), ("0.5", 1.0), ("+Inf", 3.0), ("1", 3.0)]));

    // A native histogram's staleness marker (its sum the stale NaN, no counts; what Prometheus
    // writes when the target goes away) is dropped whole: 204, nothing stored (QA pass 23a: a
    // histogram of zeros, and 400 for the NaN sum).
    let stale = PromHistogram {
        count_int: Some(0),
        sum: f64::from_bits(STALE_NAN_BITS),
        schema: 0,
        zero_threshold: 0.001,
        timestamp: T_MS + 1000,
        ..Default::default()
    };
    let req = V2Request { symbols: req.symbols.clone(), timeseries: vec![series(7, vec![], vec![stale])] };
    let compressed = snap::raw::Encoder::new().compress_vec(&prost::Message::encode_to_vec(&req)).unwrap();
    let (code, text) = post(&addr, Some(TOKEN), v2, &compressed).await;
    assert_eq!(code, 204, "{text}");
    assert_eq!(read(&store, "lat_seconds_count").len(), 1, "no histogram of zeros");
    assert_eq!(le("lat_seconds_bucket").len(), 6);

    // Non-whole float counts and a reference outside the symbol table: 400 with the reason.
    let req = V2Request {
        symbols: req.symbols.clone(),
        timeseries: vec![
            series(9, vec![], vec![bad]),
            series(2, vec![PromSample { value: 2.0, timestamp: T_MS + 1 }], vec![]),
        ],
    };
    let compressed = snap::raw::Encoder::new().compress_vec(&prost::Message::encode_to_vec(&req)).unwrap();
    let (code, text) = post(&addr, Some(TOKEN), v2, &compressed).await;
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("1 samples accepted") && text.contains("not a whole"), "{text}");
    let req = V2Request { symbols: vec![Bytes::new()], timeseries: vec![series(2, vec![], vec![])] };
    let compressed = snap::raw::Encoder::new().compress_vec(&prost::Message::encode_to_vec(&req)).unwrap();
    let (code, text) = post(&addr, Some(TOKEN), v2, &compressed).await;
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("symbol reference 1 outside the table of 1 symbols"), "{text}");
    drop(stop);
    task.await.unwrap();
}

/// A 2.0 request encoded at the wire level from the spec (`io.prometheus.write.v2.Request`:
/// `symbols = 4`, `timeseries = 5`; `TimeSeries`: `labels_refs = 1` packed, `samples = 2`;
/// `Sample`: `value = 1`, `timestamp = 2`), not through the server's own message types, is
/// stored; a 1.0 `prometheus.WriteRequest` sent with the 2.0 content type is refused, not
/// answered 204 with nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_write_2_field_numbers_are_the_specs() {
    use prost::encoding::{WireType, encode_key, encode_varint};
    fn field(tag: u32, body: &[u8], out: &mut Vec<u8>) {
        encode_key(tag, WireType::LengthDelimited, out);
        encode_varint(body.len() as u64, out);
        out.extend_from_slice(body);
    }
    let mut body = Vec::new();
    for symbol in ["", "__name__", "spec_up", "host", "n1"] {
        field(4, symbol.as_bytes(), &mut body);
    }
    let mut refs = Vec::new();
    for r in [1u64, 2, 3, 4] {
        encode_varint(r, &mut refs);
    }
    for (i, value) in [1.5f64, 2.5].into_iter().enumerate() {
        let mut sample = Vec::new();
        encode_key(1, WireType::SixtyFourBit, &mut sample);
        sample.extend_from_slice(&value.to_le_bytes());
        encode_key(2, WireType::Varint, &mut sample);
        encode_varint((T_MS + i as i64) as u64, &mut sample);
        let mut series = Vec::new();
        field(1, &refs, &mut series);
        field(2, &sample, &mut series);
        field(5, &series, &mut body);
    }
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), StoreConfig { max_future_ns: None, ..Default::default() }).unwrap());
    let (addr, stop, task) = start(store.clone()).await;
    let v2 = "application/x-protobuf;proto=io.prometheus.write.v2.Request";
    let snappy = |raw: &[u8]| snap::raw::Encoder::new().compress_vec(raw).unwrap();
    let (code, text) = post(&addr, Some(TOKEN), v2, &snappy(&body)).await;
    assert_eq!(code, 204, "{text}");
    let stored: Vec<f64> = read(&store, "spec_up").into_iter().map(|(_, _, v)| v).collect();
    assert_eq!(stored, [1.5, 2.5]);

    let v1 = PromWriteRequest { timeseries: vec![series(&[("__name__", "v1_up"), ("host", "n1")], &[(T_MS, 1.0)])] };
    let (code, text) = post(&addr, Some(TOKEN), v2, &snappy(&prost::Message::encode_to_vec(&v1))).await;
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("no symbols (field 4) and no timeseries (field 5)"), "{text}");
    assert!(read(&store, "v1_up").is_empty());
    drop(stop);
    task.await.unwrap();
}

/// A label given twice, or a reserved name together with its `prom_` form, rejects the series
/// (reason `label_collision`) instead of keeping one of the values; the other series are kept.
#[test]
fn colliding_labels_reject_their_series() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig { max_future_ns: None, ..Default::default() }).unwrap();
    let request = PromWriteRequest {
        timeseries: vec![
            series(&[("__name__", "twice"), ("host", "h1"), ("a", "1"), ("a", "2")], &[(T_MS, 1.0)]),
            series(&[("__name__", "reserved"), ("host", "h1"), ("time", "x"), ("prom_time", "y")], &[(T_MS, 1.0)]),
            series(&[("__name__", "name"), ("__name__", "other"), ("host", "h1")], &[(T_MS, 1.0)]),
            series(&[("__name__", "fine"), ("host", "h1"), ("time", "x")], &[(T_MS, 1.0)]),
        ],
    };
    let c = convert(&store, &SeriesCache::default(), request, &Limits::default()).unwrap();
    assert_eq!(c.batch.series.len(), 1);
    assert_eq!(c.batch.series[0].0.metric, "fine");
    assert_eq!(c.batch.series[0].0.labels.get("prom_time").map(|v| v.as_str()), Some("x"));
    assert_eq!(c.rejected, 3, "{:?}", c.by_reason);
    assert!(c.by_reason.iter().any(|(reason, _)| *reason == "label_collision"), "{:?}", c.by_reason);
}

/// A label set the store knows is resolved to its id once, then read from the cache; cached or
/// not, the samples, rejections and the resulting write are the same.
#[test]
fn label_sets_resolve_through_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig { max_future_ns: None, ..Default::default() }).unwrap();
    let limits = Limits::default();
    let cache = SeriesCache::default();
    let known = [("__name__", "up"), ("instance", "node-1:9100"), ("job", "node")];
    let request = |samples: &[(i64, f64)]| PromWriteRequest {
        timeseries: vec![
            series(&known, samples),
            series(&[("__name__", "new_metric"), ("host", "h1")], &[(T_MS, 5.0)]),
            series(&[("__name__", "bad"), ("host", "h\u{0}")], &[(T_MS, 1.0)]),
        ],
    };
    // Not known yet: everything by key; the invalid label set is rejected, nothing cached.
    let first = convert(&store, &cache, request(&[(T_MS, 1.0)]), &limits).unwrap();
    assert!(first.rows.is_empty());
    assert_eq!(first.batch.series.len(), 2);
    assert_eq!(first.rejected, 1, "{:?}", first.by_reason);
    assert_eq!(cache.len(), 0);
    let Write::Keyed(batch) =
        into_write(&store, first.rows, first.batch, Rekey::new(first.by_id, |_: &u32| None)).unwrap()
    else {
        panic!("keyed")
    };
    assert_eq!(store.write(&batch).unwrap().accepted, 2);
    let up = store.series_id(&batch.series[0].0).unwrap().unwrap();

    // Known to the store now: resolved by id and cached; a sample out of range is rejected.
    let out_of_range = (i64::MAX / 1_000_000 + 1, 1.0);
    let second = convert(&store, &cache, request(&[(T_MS + 1000, 2.0), out_of_range]), &limits).unwrap();
    assert_eq!(cache.len(), 2);
    assert_eq!((second.rows.series.clone(), second.rows.value.clone()), (vec![up, up + 1], vec![2.0, 5.0]));
    assert!(second.batch.series.is_empty());
    assert_eq!(second.rejected, 2, "{:?}", second.by_reason);
    // From the cache: the same rows and the same rejection messages.
    let third = convert(&store, &cache, request(&[(T_MS + 1000, 2.0), out_of_range]), &limits).unwrap();
    assert_eq!((&third.rows.series, &third.rows.value), (&second.rows.series, &second.rows.value));
    assert_eq!((third.rejected, third.error_message()), (second.rejected, second.error_message()));
    assert!(third.error_message().contains("out of range"), "{}", third.error_message());

    // A label that is not UTF-8 is a rejected series, not a failed request.
    let mut req = request(&[(T_MS + 2000, 3.0)]);
    req.timeseries[1].labels[1].value = Bytes::from_static(b"\xff\xfe");
    let c = convert(&store, &cache, req, &limits).unwrap();
    assert_eq!(c.rows.len(), 1);
    assert!(c.error_message().contains("not UTF-8"), "{}", c.error_message());
}

/// Label sets resolved to ids (from the cache, or looked up by the request) whose series the
/// compaction pass retired before the write: the write defines them anew from the request's
/// labels, so Prometheus gets 204 instead of a 400 that would drop the samples.
#[test]
fn ids_retired_between_lookup_and_write_go_by_key() {
    use lockstep_engine::{storage::OsStorage, wallclock::ManualClock};
    const HOUR_MS: i64 = 3_600_000;
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig { retention_ns: Some(3 * HOUR_MS * 1_000_000), ..StoreConfig::default() };
    let clock = Arc::new(ManualClock(((T_MS + 10 * HOUR_MS) * 1_000_000).into()));
    let store = Store::open_with(dir.path(), config, Arc::new(OsStorage), clock).unwrap();
    let limits = Limits::default();
    let (a, b) = ([("__name__", "up"), ("instance", "node-1:9100")], [("__name__", "up"), ("instance", "node-2:9100")]);
    let live = [("__name__", "up"), ("instance", "node-3:9100")];
    let request = |labels: &[&[(&str, &str)]], t: i64| PromWriteRequest {
        timeseries: labels.iter().enumerate().map(|(i, l)| series(l, &[(t, i as f64)])).collect(),
    };
    let write = |mut c: Converted| {
        let rekey = rekey(&mut c);
        match into_write(&store, c.rows, c.batch, rekey).unwrap() {
            Write::Rows(rows, mut rekey) => store.write_rows_keyed(rows, rekey.key_of()).unwrap(),
            Write::Keyed(batch) => store.write(&batch).unwrap(),
        }
    };
    // `a` and `b` have samples in a partition the retention expires, `live` in a later one too.
    let (cache, t) = (SeriesCache::default(), T_MS + 9 * HOUR_MS);
    assert_eq!(write(convert(&store, &cache, request(&[&a, &b, &live], T_MS), &limits).unwrap()).accepted, 3);
    // Sent again (harmless duplicates): now resolved by the store, and cached.
    assert_eq!(write(convert(&store, &cache, request(&[&a, &b], T_MS), &limits).unwrap()).accepted, 2);
    assert_eq!(cache.len(), 2);
    assert_eq!(write(convert(&store, &cache, request(&[&live], t), &limits).unwrap()).accepted, 1);
    store.flush().unwrap();
    // Resolved while live: through the cache, and looked up afresh.
    let cached = convert(&store, &cache, request(&[&a, &b], t + 1000), &limits).unwrap();
    let fresh = convert(&store, &SeriesCache::default(), request(&[&a, &b], t + 2000), &limits).unwrap();
    assert_eq!((cached.rows.runs().count(), fresh.rows.runs().count()), (2, 2), "all by id");
    assert_eq!(store.compact(false).unwrap().series_retired, 2, "`a` and `b` had expired samples only");
    for c in [cached, fresh] {
        let outcome = write(c);
        assert_eq!((outcome.accepted, outcome.rejected.len()), (2, 0), "{:?}", outcome.rejected);
    }
    let got = read(&store, "up");
    let at = |host: &str| got.iter().filter(|r| r.0.contains(host)).map(|r| (r.1 / 1_000_000, r.2)).collect::<Vec<_>>();
    assert_eq!(at("node-1"), [(t + 1000, 0.0), (t + 2000, 0.0)]);
    assert_eq!(at("node-2"), [(t + 1000, 1.0), (t + 2000, 1.0)]);
    assert_eq!(at("node-3"), [(t, 0.0)]);
}
