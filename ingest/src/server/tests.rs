//! A real server on 127.0.0.1:0 and a real tonic client: malformed protobuf is
//! `INVALID_ARGUMENT`, and a failing store yields statuses that name no server path.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;

use lockstep_engine::storage::{FaultyStorage, OsStorage};
use lockstep_engine::wallclock::SystemClock;
use lockstep_engine::{Store, StoreConfig};
use lockstep_proto::ingest::v1::write_client::WriteClient;
use lockstep_proto::ingest::v1::{SeriesDefinition, SeriesSamples, WriteRequest};
use prost::bytes::{Buf, BufMut};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{Code, Status};

use super::{ServeOptions, Server};

const T: i64 = 1_767_225_600_000_000_000;

/// Sends and receives raw message bytes, so a test can send what no real client would.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

/// A server over `store` until the returned sender is dropped; its URL.
async fn start(store: Arc<Store>) -> (String, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut options = ServeOptions::default();
    options.config.drain_timeout = std::time::Duration::from_millis(100);
    let server = Server::new(store, options);
    let task = tokio::spawn(async move {
        let _ = server
            .run(listener, async move {
                let _ = stopped.await;
            })
            .await;
    });
    (url, stop, task)
}

fn write_request(host: &str) -> WriteRequest {
    let labels = HashMap::from([("host".to_string(), host.to_string())]);
    WriteRequest {
        definitions: vec![SeriesDefinition { r#ref: 1, metric: "m".into(), labels }],
        series: vec![SeriesSamples { r#ref: 1, timestamp_deltas: vec![T], values: vec![1.0] }],
        sequence: 1,
        columns: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_protobuf_is_invalid_argument() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), StoreConfig::default()).unwrap());
    let (url, stop, task) = start(store).await;
    let channel = Channel::from_shared(url).unwrap().connect().await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    // Field 1 with wire type 7 (no such wire type), then a truncated varint.
    let garbage = vec![0x0f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x0a, 0x50];
    for path in [
        "/lockstep.ingest.v1.Write/Write",
        "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
        "/lockstep.ingest.v1.ClockSync/Upload",
    ] {
        grpc.ready().await.unwrap();
        let e = grpc
            .unary::<_, Vec<u8>, _>(tonic::Request::new(garbage.clone()), PathAndQuery::from_static(path), RawCodec)
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{path}: {e:?}");
        assert!(
            e.message().starts_with("malformed request: failed to decode Protobuf message"),
            "{path}: {}",
            e.message()
        );
    }
    // A stream: the first message is valid, the second is not.
    let valid = prost::Message::encode_to_vec(&write_request("node-1"));
    grpc.ready().await.unwrap();
    let mut acks = grpc
        .streaming::<_, _, Vec<u8>, _>(
            tonic::Request::new(futures::stream::iter([valid, garbage])),
            PathAndQuery::from_static("/lockstep.ingest.v1.Write/WriteStream"),
            RawCodec,
        )
        .await
        .unwrap()
        .into_inner();
    assert!(acks.message().await.unwrap().is_some(), "the valid batch is acknowledged");
    let e = acks.message().await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    // The server still works.
    let ack = WriteClient::new(channel).write(write_request("node-2")).await.unwrap().into_inner();
    assert_eq!(ack.accepted, 1);
    drop(stop);
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_store_yields_statuses_without_paths() {
    let dir = tempfile::tempdir().unwrap();
    let faulty = Arc::new(FaultyStorage::new(Arc::new(OsStorage), u64::MAX));
    let store = Store::open_with(dir.path(), StoreConfig::default(), faulty.clone(), Arc::new(SystemClock)).unwrap();
    let store = Arc::new(store);
    let (url, stop, task) = start(store).await;
    let mut client = WriteClient::new(Channel::from_shared(url).unwrap().connect().await.unwrap());
    assert_eq!(client.write(write_request("node-1")).await.unwrap().into_inner().accepted, 1);
    faulty.crash();
    let dir_text = dir.path().to_string_lossy().into_owned();
    let mut codes = Vec::new();
    for host in ["node-1", "node-2"] {
        let e = client.write(write_request(host)).await.unwrap_err();
        assert!(!e.message().contains(&dir_text), "{e:?} names the store path");
        assert!(!e.message().contains("injected"), "{e:?} carries the i/o error");
        assert!(e.message().contains("(ref "), "{e:?} has no reference id");
        codes.push(e.code());
    }
    assert!(codes.iter().all(|c| matches!(c, Code::Unavailable | Code::Internal)), "{codes:?}");
    drop(stop);
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metric_names_with_nul_or_of_a_mebibyte_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), StoreConfig::default()).unwrap());
    let (url, stop, task) = start(store).await;
    let mut client = WriteClient::new(Channel::from_shared(url).unwrap().connect().await.unwrap());
    let cases = [
        ("gpu\0util".to_string(), r#"metric name "gpu\0util" contains '\0'"#),
        ("m".repeat(1 << 20), "is 1048576 bytes long (at most 256)"),
    ];
    for (metric, want) in cases {
        let mut request = write_request("node-1");
        request.definitions[0].metric = metric;
        let e = client.write(request).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().starts_with("definitions[0] (ref 1): invalid series: "), "{}", e.message());
        assert!(e.message().contains(want) && e.message().len() < 400, "{}", e.message());
    }
    drop(stop);
    task.await.unwrap();
}

/// Under a memory limit a gRPC message takes its bytes from the bodies' share of it (a quarter):
/// one larger than the share is refused with `OUT_OF_RANGE` as it arrives, before tonic buffered
/// it (QA pass 23a: 10 exports of 50 MB at once took a 256 MiB server to 1 GB), and the room it
/// took is free again for the next call. Without a limit the same message is read and refused
/// for what it says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_messages_take_their_room_in_the_bodies_share() {
    for limit in [Some(32u64 << 20), None] {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), StoreConfig::default()).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let mut options = ServeOptions::default();
        options.config.drain_timeout = std::time::Duration::from_millis(100);
        options.config.limits.memory_limit_bytes = limit;
        let server = Server::new(store.clone(), options);
        let task = tokio::spawn(async move {
            let _ = server.run(listener, async move { stopped.await.unwrap_or_default() }).await;
        });
        let mut client = WriteClient::new(Channel::from_shared(url).unwrap().connect().await.unwrap());
        client.write(write_request("node-1")).await.unwrap();
        let mut large = write_request("node-2");
        large.definitions[0].metric = "m".repeat(10 << 20);
        let e = client.write(large).await.unwrap_err();
        if limit.is_some() {
            assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
            assert!(e.message().contains("more than the server takes in at once: 8 MiB"), "{}", e.message());
        } else {
            assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        }
        client.write(write_request("node-3")).await.unwrap();
        assert_eq!(store.scan_all(Default::default()).unwrap().len(), 2);
        drop(stop);
        task.await.unwrap();
    }
}

/// Over its memory limit the server refuses writes only while the buffer holds enough rows for
/// the pressure flush to take them: memory held by something else (the limit here is below any
/// process's RSS) once refused every write for good, a buffer of one row included (QA pass 24).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_held_elsewhere_does_not_refuse_writes_for_good() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig { flush_rows: 1 << 20, ..StoreConfig::default() };
    let store = Arc::new(Store::open(dir.path(), config).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut options = ServeOptions::default();
    options.config.drain_timeout = std::time::Duration::from_millis(100);
    options.config.limits.memory_limit_bytes = Some(1 << 20);
    let server = Server::new(store.clone(), options);
    let task = tokio::spawn(async move {
        let _ = server.run(listener, async move { stopped.await.unwrap_or_default() }).await;
    });
    let mut client = WriteClient::new(Channel::from_shared(url).unwrap().connect().await.unwrap());
    // Let the RSS sampler see the process above its 1 MiB limit.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    for i in 0..20 {
        client.write(write_request(&format!("node-{i}"))).await.unwrap();
    }
    assert_eq!(store.buffered_rows().unwrap(), 20);
    drop(stop);
    task.await.unwrap();
}
