//! `lockstep-load`: the load generator of `benches/ingest_load.py` (not part of the `lockstep`
//! binary; build it with `cargo build --release --features load-generator --bin lockstep-load`).
//!
//! N clients, each with its own connection and hosts, stream pre-built columnar batches
//! (`WriteStream`, a window of batches in flight) until a fixed number of samples is
//! acknowledged; overload answers (`RESOURCE_EXHAUSTED`, `UNAVAILABLE`) are counted and the
//! unacknowledged batches resent after the server's retry hint. Prints one JSON line.
//!
//! Batches are protobuf-encoded once, before the clock starts (the VictoriaMetrics client of
//! the same benchmark posts prebuilt bodies too), and sent through a codec that copies the
//! bytes into the gRPC frame: the measurement is the server's, not the client's encoder's.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::Context;
use lockstep_proto::ingest::v1::{SeriesColumns, SeriesDefinition, SeriesSamples, WriteRequest, WriteResponse};
use prost::Message;
use prost::bytes::{BufMut, Bytes};
use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};
use tonic_prost::ProstDecoder;

/// Arguments of `lockstep-load`.
#[derive(Debug, clap::Parser)]
#[command(name = "lockstep-load", about = "Load generator for `lockstep serve` (benches/ingest_load.py)")]
pub struct Args {
    /// Server URL, e.g. http://127.0.0.1:4317.
    #[arg(long)]
    addr: String,
    /// Bearer token (write role).
    #[arg(long, env = "LOCKSTEP_TOKEN")]
    token: Option<String>,
    /// Concurrent clients (one connection and one stream each).
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Total samples to get acknowledged.
    #[arg(long, default_value_t = 10_000_000)]
    samples: u64,
    /// Series per batch (each client owns `series` distinct series: 60 per host).
    #[arg(long, default_value_t = 2_400)]
    series: usize,
    /// Consecutive 1 s scrapes per series in one batch.
    #[arg(long, default_value_t = 5)]
    points: usize,
    /// Batches in flight per stream.
    #[arg(long, default_value_t = 4)]
    window: usize,
    /// First timestamp (ns); default 2026-01-01T00:00:00Z.
    #[arg(long, default_value_t = 1_767_225_600_000_000_000)]
    start_ns: i64,
    /// Also write the same samples as VictoriaMetrics `/api/v1/import` JSON lines, one file per
    /// client in this directory, one body per batch (bodies separated by an empty line).
    #[arg(long)]
    dump_vm: Option<std::path::PathBuf>,
    /// Only build (and dump) the batches; do not connect.
    #[arg(long)]
    no_send: bool,
    /// Request form: `columns` (`WriteRequest.columns`, four packed arrays per batch) or
    /// `series` (one `SeriesSamples` per series).
    #[arg(long, value_enum, default_value_t = Form::Columns)]
    form: Form,
}

/// How a batch carries its samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Form {
    /// `WriteRequest.columns`.
    Columns,
    /// `WriteRequest.series`.
    Series,
}

/// The same batch in the columnar form (deltas run across the whole column).
fn to_columns(mut batch: WriteRequest) -> WriteRequest {
    let mut c = SeriesColumns::default();
    let n = batch.series.iter().map(|s| s.values.len()).sum();
    c.timestamp_deltas.reserve(n);
    c.values.reserve(n);
    let mut prev = 0i64;
    for s in std::mem::take(&mut batch.series) {
        c.refs.push(s.r#ref);
        c.counts.push(s.values.len() as u32);
        let mut abs = 0i64;
        for d in s.timestamp_deltas {
            abs += d;
            c.timestamp_deltas.push(abs - prev);
            prev = abs;
        }
        c.values.extend(s.values);
    }
    batch.columns = Some(c);
    batch
}

/// Writes one client's batches as VictoriaMetrics JSON lines (timestamps floored to ms).
fn dump_vm(path: &std::path::Path, defs: &[SeriesDefinition], batches: &[WriteRequest]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out =
        std::io::BufWriter::new(std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?);
    for b in batches {
        for s in &b.series {
            let Some(d) = defs.get(s.r#ref as usize) else { continue };
            let mut labels: Vec<(&str, &str)> = d.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            labels.sort_unstable();
            let mut metric = serde_json::Map::new();
            metric.insert("__name__".into(), d.metric.clone().into());
            for (k, v) in labels {
                metric.insert(k.into(), v.into());
            }
            let mut t = 0i64;
            let ts: Vec<i64> = s
                .timestamp_deltas
                .iter()
                .map(|d| {
                    t += d;
                    t.div_euclid(1_000_000)
                })
                .collect();
            let line = serde_json::json!({"metric": metric, "values": s.values, "timestamps": ts});
            writeln!(out, "{line}")?;
        }
        writeln!(out)?;
    }
    out.flush()?;
    Ok(())
}

/// Builds one client's series definitions and batches (fixed seed per client).
fn build(
    client: usize,
    series: usize,
    points: usize,
    batches: usize,
    start_ns: i64,
) -> (Vec<SeriesDefinition>, Vec<WriteRequest>) {
    let metrics = [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_POWER_USAGE",
        "node_network_receive_bytes_total",
        "ib_port_xmit_data_total",
        "train_step_duration_seconds",
        "node_disk_written_bytes_total",
    ];
    let defs: Vec<SeriesDefinition> = (0..series)
        .map(|i| {
            let host = format!("c{client}-node-{:03}", i / 60);
            let device = format!("{}", i % 10);
            let metric = metrics[(i / 10) % metrics.len()];
            let labels = [("host".to_string(), host), ("device".to_string(), device)].into_iter().collect();
            SeriesDefinition { r#ref: i as u32, metric: metric.to_string(), labels }
        })
        .collect();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15 ^ client as u64;
    let mut rnd = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut counters = vec![0f64; series];
    let out = (0..batches)
        .map(|b| {
            let series_data = (0..series)
                .map(|i| {
                    let mut deltas = Vec::with_capacity(points);
                    let mut values = Vec::with_capacity(points);
                    let mut prev = 0i64;
                    for p in 0..points {
                        let step = (b * points + p) as i64;
                        let jitter = (rnd() % 2_000_000) as i64; // ms-level scrape jitter, ns precision
                        let t = start_ns + step * 1_000_000_000 + (i as i64 % 1000) * 1_000 + jitter;
                        deltas.push(t - prev);
                        prev = t;
                        let v = if (i / 10) % 2 == 0 {
                            ((rnd() % 10_000) as f64) / 100.0 // gauge, 2 decimals
                        } else {
                            counters[i] += (rnd() % 5_000) as f64;
                            counters[i]
                        };
                        values.push(v);
                    }
                    SeriesSamples { r#ref: i as u32, timestamp_deltas: deltas, values }
                })
                .collect();
            WriteRequest { definitions: Vec::new(), series: series_data, sequence: b as u64, columns: None }
        })
        .collect();
    (defs, out)
}

/// A gRPC codec whose messages are already-encoded `WriteRequest`s; acks decode with prost.
#[derive(Debug, Clone, Copy, Default)]
struct PreEncoded;

/// Copies pre-encoded message bytes into the frame.
#[derive(Debug, Clone, Copy, Default)]
struct RawEncoder;

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Codec for PreEncoded {
    type Encode = Bytes;
    type Decode = WriteResponse;
    type Encoder = RawEncoder;
    type Decoder = ProstDecoder<WriteResponse>;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> ProstDecoder<WriteResponse> {
        ProstDecoder::default()
    }
}

/// One client's batches, encoded.
struct Encoded {
    /// A `WriteRequest` holding only the series definitions; a stream's first message is this
    /// followed by a batch (concatenated protobuf messages merge, repeated fields append).
    defs: Bytes,
    batches: Vec<Bytes>,
}

fn encode(defs: Vec<SeriesDefinition>, batches: Vec<WriteRequest>) -> Encoded {
    let defs = WriteRequest { definitions: defs, ..Default::default() }.encode_to_vec().into();
    Encoded { defs, batches: batches.iter().map(|b| Bytes::from(b.encode_to_vec())).collect() }
}

#[derive(Debug, Default)]
struct ClientResult {
    acked_samples: u64,
    acked_batches: u64,
    overload_rejects: u64,
    latencies: Vec<Duration>,
}

fn authorized<T>(msg: T, token: &Option<String>) -> anyhow::Result<Request<T>> {
    let mut req = Request::new(msg);
    if let Some(t) = token {
        req.metadata_mut().insert("authorization", format!("Bearer {t}").parse()?);
    }
    Ok(req)
}

async fn run_client(
    channel: Channel,
    token: Option<String>,
    encoded: Encoded,
    window: usize,
) -> anyhow::Result<ClientResult> {
    let Encoded { defs, batches } = encoded;
    let mut client = tonic::client::Grpc::new(channel).max_decoding_message_size(64 << 20);
    let path = PathAndQuery::from_static("/lockstep.ingest.v1.Write/WriteStream");
    let mut result = ClientResult::default();
    let mut acked = 0usize;
    while acked < batches.len() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(window.max(1));
        let outbound = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
        let mut sent: VecDeque<Instant> = VecDeque::new();
        let mut next = acked;
        let mut tx = Some(tx);
        let send = |i: usize, first: bool| {
            if first { [defs.as_ref(), batches[i].as_ref()].concat().into() } else { batches[i].clone() }
        };
        // A failed send means the server already ended this stream (e.g. overload); its
        // status arrives on the inbound side and decides about the retry.
        while next < batches.len() && next - acked < window.max(1) {
            let Some(t) = &tx else { break };
            if t.send(send(next, next == acked)).await.is_err() {
                tx = None;
                break;
            }
            sent.push_back(Instant::now());
            next += 1;
        }
        client.ready().await.map_err(|e| anyhow::anyhow!("connection not ready: {e}"))?;
        let mut inbound = match client.streaming(authorized(outbound, &token)?, path.clone(), PreEncoded).await {
            Ok(r) => r.into_inner(),
            Err(s) if matches!(s.code(), Code::ResourceExhausted | Code::Unavailable) => {
                result.overload_rejects += 1;
                tokio::time::sleep(retry_hint(&s)).await;
                continue;
            }
            Err(s) => anyhow::bail!("stream failed: {s}"),
        };
        loop {
            match inbound.message().await {
                Ok(Some(ack)) => {
                    if let Some(t) = sent.pop_front() {
                        result.latencies.push(t.elapsed());
                    }
                    acked += 1;
                    result.acked_batches += 1;
                    result.acked_samples += ack.accepted;
                    if next < batches.len() {
                        if let Some(t) = &tx {
                            if t.send(send(next, false)).await.is_ok() {
                                sent.push_back(Instant::now());
                                next += 1;
                            } else {
                                tx = None;
                            }
                        }
                    } else if acked == batches.len() {
                        tx = None;
                    }
                }
                Ok(None) => break,
                Err(s) if matches!(s.code(), Code::ResourceExhausted | Code::Unavailable) => {
                    result.overload_rejects += 1;
                    tokio::time::sleep(retry_hint(&s)).await;
                    break;
                }
                Err(s) => anyhow::bail!("stream failed: {s}"),
            }
        }
        drop(tx);
    }
    Ok(result)
}

fn retry_hint(s: &tonic::Status) -> Duration {
    let ms = s
        .metadata()
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(100);
    Duration::from_millis(ms)
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1e3
}

/// Runs the load and prints a JSON summary.
fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let clients = args.clients.max(1);
    let per_batch = (args.series * args.points) as u64;
    anyhow::ensure!(per_batch > 0, "--series and --points must be positive");
    let per_client = args.samples.div_ceil(clients as u64);
    let batches_per_client = per_client.div_ceil(per_batch) as usize;
    let prepared: Vec<_> =
        (0..clients).map(|c| build(c, args.series, args.points, batches_per_client, args.start_ns)).collect();
    if let Some(dir) = &args.dump_vm {
        std::fs::create_dir_all(dir)?;
        for (c, (defs, batches)) in prepared.iter().enumerate() {
            dump_vm(&dir.join(format!("client-{c}.jsonl")), defs, batches)?;
        }
    }
    if args.no_send {
        return Ok(());
    }
    let prepared: Vec<Encoded> = prepared
        .into_iter()
        .map(|(d, b)| match args.form {
            Form::Series => encode(d, b),
            Form::Columns => encode(d, b.into_iter().map(to_columns).collect()),
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let mut channels = Vec::new();
        for _ in 0..clients {
            let ch = Channel::from_shared(args.addr.clone())?
                .connect()
                .await
                .with_context(|| format!("connecting {}", args.addr))?;
            channels.push(ch);
        }
        let started = Instant::now();
        let mut tasks = Vec::new();
        for (encoded, ch) in prepared.into_iter().zip(channels) {
            tasks.push(tokio::spawn(run_client(ch, args.token.clone(), encoded, args.window)));
        }
        let mut total = ClientResult::default();
        for t in tasks {
            let r = t.await??;
            total.acked_samples += r.acked_samples;
            total.acked_batches += r.acked_batches;
            total.overload_rejects += r.overload_rejects;
            total.latencies.extend(r.latencies);
        }
        let secs = started.elapsed().as_secs_f64();
        total.latencies.sort_unstable();
        let summary = serde_json::json!({
            "clients": clients,
            "batch_samples": per_batch,
            "window": args.window,
            "acked_samples": total.acked_samples,
            "acked_batches": total.acked_batches,
            "overload_rejects": total.overload_rejects,
            "seconds": secs,
            "samples_per_s": total.acked_samples as f64 / secs,
            "p50_ms": percentile(&total.latencies, 0.5),
            "p99_ms": percentile(&total.latencies, 0.99),
        });
        println!("{summary}");
        anyhow::Ok(())
    })
}
