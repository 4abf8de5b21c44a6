#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use lockstep_engine::StoreConfig;
use opentelemetry_proto::tonic::metrics::v1::{
    Gauge, Histogram, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, exponential_histogram_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

const T: u64 = 1_767_225_600_000_000_000;

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(any_value::Value::StringValue(v.into())) }),
        ..Default::default()
    }
}

fn request(host: Option<&str>, metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
    let attributes = host.map(|h| vec![kv("host.name", h), kv("service.name", "trainer")]).unwrap_or_default();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource { attributes, ..Default::default() }),
            scope_metrics: vec![ScopeMetrics { metrics, ..Default::default() }],
            ..Default::default()
        }],
    }
}

fn num(t: u64, v: f64, attrs: Vec<KeyValue>) -> NumberDataPoint {
    NumberDataPoint {
        time_unix_nano: t,
        value: Some(number_data_point::Value::AsDouble(v)),
        attributes: attrs,
        ..Default::default()
    }
}

fn metric(name: &str, data: metric::Data) -> Metric {
    Metric { name: name.into(), data: Some(data), ..Default::default() }
}

fn find(c: &Converted, metric: &str, label: Option<(&str, &str)>) -> Vec<(i64, f64)> {
    c.batch
        .series
        .iter()
        .filter(|(k, _)| {
            k.metric == metric && label.is_none_or(|(lk, lv)| k.labels.get(lk).map(|v| v.as_str()) == Some(lv))
        })
        .flat_map(|(_, s)| s.timestamps.iter().copied().zip(s.values.iter().copied()))
        .collect()
}

#[test]
fn gauges_deltas_histograms() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig { max_future_ns: None, ..Default::default() }).unwrap();
    let deltas = Mutex::new(DeltaState::default());
    let delta_sum = |v: f64, t: u64| {
        metric(
            "bytes.sent",
            metric::Data::Sum(Sum {
                data_points: vec![num(t, v, vec![kv("nic", "eth0"), kv("host", "x"), kv("time", "y")])],
                aggregation_temporality: AggregationTemporality::Delta as i32,
                is_monotonic: true,
            }),
        )
    };
    let hist = metric(
        "lat",
        metric::Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint {
                time_unix_nano: T,
                count: 6,
                sum: Some(12.5),
                bucket_counts: vec![1, 2, 3],
                explicit_bounds: vec![0.5, 2.0],
                ..Default::default()
            }],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        }),
    );
    let gauge =
        metric("gpu.util", metric::Data::Gauge(Gauge { data_points: vec![num(T, 97.0, vec![kv("gpu", "3")])] }));
    let c = convert(&store, &deltas, request(Some("node-1"), vec![gauge, delta_sum(5.0, T), hist]), 1000, 10).unwrap();
    assert_eq!(c.rejected_points, 0);
    assert_eq!(find(&c, "gpu_util", Some(("gpu", "3"))), vec![(T as i64, 97.0)]);
    let (k, _) = c.batch.series.iter().find(|(k, _)| k.metric == "bytes_sent").unwrap();
    assert_eq!(k.host(), Some("node-1"));
    assert_eq!(k.labels.get("otel_host").map(|v| v.as_str()), Some("x"));
    assert_eq!(k.labels.get("otel_time").map(|v| v.as_str()), Some("y"));
    assert_eq!(k.labels.get("service").map(|v| v.as_str()), Some("trainer"));
    assert_eq!(find(&c, "lat_bucket", Some(("le", "0.5"))), vec![(T as i64, 1.0)]);
    assert_eq!(find(&c, "lat_bucket", Some(("le", "2"))), vec![(T as i64, 3.0)]);
    assert_eq!(find(&c, "lat_bucket", Some(("le", "+Inf"))), vec![(T as i64, 6.0)]);
    assert_eq!(find(&c, "lat_sum", None), vec![(T as i64, 12.5)]);
    assert_eq!(find(&c, "lat_count", None), vec![(T as i64, 6.0)]);
    // Delta sums accumulate into a cumulative counter.
    let c = convert(&store, &deltas, request(Some("node-1"), vec![delta_sum(3.0, T + 1)]), 1000, 10).unwrap();
    assert_eq!(find(&c, "bytes_sent", None), vec![(T as i64 + 1, 8.0)]);
    // No host: rejected with a reason; NaN gauge rejected; bad histogram rejected.
    let gauge = metric("g", metric::Data::Gauge(Gauge { data_points: vec![num(T, 1.0, vec![])] }));
    let c = convert(&store, &deltas, request(None, vec![gauge]), 1000, 10).unwrap();
    assert_eq!(c.rejected_points, 1);
    assert!(c.error_message().contains("host.name"), "{}", c.error_message());
    let gauge =
        metric("g", metric::Data::Gauge(Gauge { data_points: vec![num(T, f64::NAN, vec![]), num(T, 2.0, vec![])] }));
    let c = convert(&store, &deltas, request(Some("h"), vec![gauge]), 1000, 10).unwrap();
    assert_eq!((c.rejected_points, c.batch.len()), (1, 1));
    assert!(c.error_message().contains("not finite"), "{}", c.error_message());
    let bad = metric(
        "h",
        metric::Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint {
                time_unix_nano: T,
                count: 1,
                bucket_counts: vec![1],
                explicit_bounds: vec![1.0],
                ..Default::default()
            }],
            aggregation_temporality: 2,
        }),
    );
    let c = convert(&store, &deltas, request(Some("h"), vec![bad]), 1000, 10).unwrap();
    assert_eq!(c.by_reason, vec![("invalid_histogram", 1)]);
    let gauge =
        metric("g", metric::Data::Gauge(Gauge { data_points: vec![num(T, 1.0, vec![]), num(T + 1, 1.0, vec![])] }));
    assert_eq!(
        convert(&store, &deltas, request(Some("h"), vec![gauge]), 1, 10).unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
}

#[test]
fn exponential_histogram_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig { max_future_ns: None, ..Default::default() }).unwrap();
    let deltas = Mutex::new(DeltaState::default());
    // scale 0: base 2. Positive offset 1: buckets (2,4] and (4,8]; negative offset 0: [-2,-1).
    let p = ExponentialHistogramDataPoint {
        time_unix_nano: T,
        count: 7,
        sum: Some(20.0),
        scale: 0,
        zero_count: 1,
        positive: Some(exponential_histogram_data_point::Buckets { offset: 1, bucket_counts: vec![2, 3] }),
        negative: Some(exponential_histogram_data_point::Buckets { offset: 0, bucket_counts: vec![1] }),
        ..Default::default()
    };
    let m = metric(
        "x",
        metric::Data::ExponentialHistogram(opentelemetry_proto::tonic::metrics::v1::ExponentialHistogram {
            data_points: vec![p],
            aggregation_temporality: 2,
        }),
    );
    let c = convert(&store, &deltas, request(Some("h"), vec![m]), 1000, 10).unwrap();
    let buckets: Vec<(String, f64)> = c
        .batch
        .series
        .iter()
        .filter(|(k, _)| k.metric == "x_bucket")
        .map(|(k, s)| (k.labels["le"].to_string(), s.values[0]))
        .collect();
    assert_eq!(
        buckets,
        vec![("-1".into(), 1.0), ("0".into(), 2.0), ("4".into(), 4.0), ("8".into(), 7.0), ("+Inf".into(), 7.0)]
    );
    assert_eq!(find(&c, "x_count", None), vec![(T as i64, 7.0)]);
}

/// `gpu.id` and `gpu_id` both sanitise to `gpu_id`: the point is rejected with a reason
/// naming both attributes (before, one value silently won); other points are kept.
#[test]
fn attributes_colliding_after_sanitising_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig { max_future_ns: None, ..Default::default() }).unwrap();
    let deltas = Mutex::new(DeltaState::default());
    let points = vec![
        num(T, 1.0, vec![kv("gpu.id", "0"), kv("gpu_id", "1")]),
        num(T, 2.0, vec![kv("gpu.id", "0"), kv("gpu.id", "1")]),
        num(T, 3.0, vec![kv("gpu.id", "2"), kv("nic", "eth0")]),
    ];
    let gauge = metric("gpu.util", metric::Data::Gauge(Gauge { data_points: points }));
    let c = convert(&store, &deltas, request(Some("node-1"), vec![gauge]), 1000, 10).unwrap();
    assert_eq!(c.rejected_points, 2);
    assert_eq!(c.by_reason, vec![("label_collision", 2)]);
    let message = c.error_message();
    assert!(message.contains(r#"attributes "gpu.id" and "gpu_id" both map to label "gpu_id""#), "{message}");
    assert_eq!(find(&c, "gpu_util", Some(("gpu_id", "2"))), vec![(T as i64, 3.0)]);
    assert_eq!(c.batch.len(), 1);
}

/// Exponential bucket bounds that overflow f64 (or underflow to 0) would print as colliding
/// `le` labels: the point is rejected; summaries with a repeated quantile likewise.
#[test]
fn exponential_bounds_outside_f64_and_repeated_quantiles_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig { max_future_ns: None, ..Default::default() }).unwrap();
    let deltas = Mutex::new(DeltaState::default());
    let exp = |scale: i32, offset: i32| {
        metric(
            "x",
            metric::Data::ExponentialHistogram(opentelemetry_proto::tonic::metrics::v1::ExponentialHistogram {
                data_points: vec![ExponentialHistogramDataPoint {
                    time_unix_nano: T,
                    count: 3,
                    scale,
                    positive: Some(exponential_histogram_data_point::Buckets { offset, bucket_counts: vec![1, 1, 1] }),
                    ..Default::default()
                }],
                aggregation_temporality: 2,
            }),
        )
    };
    for (scale, offset) in [(0, 1022), (0, i32::MAX - 1), (0, -1100), (-10, 2), (20, i32::MIN)] {
        let c = convert(&store, &deltas, request(Some("h"), vec![exp(scale, offset)]), 10_000, 10).unwrap();
        assert_eq!((c.rejected_points, c.batch.len()), (1, 0), "scale {scale} offset {offset}");
        assert_eq!(c.by_reason, vec![("invalid_histogram", 1)]);
        assert!(c.error_message().contains("are not finite and distinct"), "{}", c.error_message());
    }
    // The largest finite bounds still pass: 2^1021, 2^1022, 2^1023.
    let c = convert(&store, &deltas, request(Some("h"), vec![exp(0, 1020)]), 10_000, 10).unwrap();
    assert_eq!(c.rejected_points, 0, "{}", c.error_message());

    let q = |quantile: f64, value: f64| opentelemetry_proto::tonic::metrics::v1::summary_data_point::ValueAtQuantile {
        quantile,
        value,
    };
    let summary = metric(
        "s",
        metric::Data::Summary(opentelemetry_proto::tonic::metrics::v1::Summary {
            data_points: vec![opentelemetry_proto::tonic::metrics::v1::SummaryDataPoint {
                time_unix_nano: T,
                count: 2,
                sum: 3.0,
                quantile_values: vec![q(0.5, 1.0), q(0.5, 2.0)],
                ..Default::default()
            }],
        }),
    );
    let c = convert(&store, &deltas, request(Some("h"), vec![summary]), 10_000, 10).unwrap();
    assert_eq!(c.by_reason, vec![("label_collision", 1)]);
    assert!(c.error_message().contains("twice"), "{}", c.error_message());
}

/// The engine validates names on every path: an OTLP metric name of 1 MiB is rejected by the
/// store with a message that says why without quoting the whole name.
#[test]
fn a_metric_name_of_one_mebibyte_is_rejected_by_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig { max_future_ns: None, ..Default::default() }).unwrap();
    let deltas = Mutex::new(DeltaState::default());
    let gauge = |name: &str| metric(name, metric::Data::Gauge(Gauge { data_points: vec![num(T, 1.0, vec![])] }));
    let c =
        convert(&store, &deltas, request(Some("h"), vec![gauge(&"m".repeat(1 << 20)), gauge("ok")]), 10, 10).unwrap();
    let outcome = store.write(&c.batch).unwrap();
    assert_eq!((outcome.accepted, outcome.rejected.len()), (1, 1));
    let message = outcome.rejected[0].error.to_string();
    assert!(message.contains("is 1048576 bytes long (at most 256)"), "{}", &message[..message.len().min(300)]);
    assert!(message.len() < 400 && outcome.rejected[0].series.len() < 400);
}

/// Names in other scripts stay apart: `тест` and `проб` (and attribute keys `темп` and
/// `знач`) became `____` each, one series, and one point overwrote the other.
#[test]
fn names_outside_ascii_stay_apart() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig { max_future_ns: None, ..Default::default() }).unwrap();
    let deltas = Mutex::new(DeltaState::default());
    let gauge = |name: &str, v: f64, key: &str| {
        metric(name, metric::Data::Gauge(Gauge { data_points: vec![num(T, v, vec![kv(key, "0")])] }))
    };
    let metrics = vec![gauge("тест", 1.0, "темп.gpu"), gauge("проб", 2.0, "знач"), gauge("温度.gpu", 3.0, "温度")];
    let c = convert(&store, &deltas, request(Some("node-1"), metrics), 1000, 10).unwrap();
    assert_eq!(c.rejected_points, 0, "{}", c.error_message());
    assert_eq!(find(&c, "тест", Some(("темп_gpu", "0"))), vec![(T as i64, 1.0)]);
    assert_eq!(find(&c, "проб", Some(("знач", "0"))), vec![(T as i64, 2.0)]);
    assert_eq!(find(&c, "温度_gpu", Some(("温度", "0"))), vec![(T as i64, 3.0)]);
    assert_eq!(store.write(&c.batch).unwrap().accepted, 3, "the store takes the names");
}

/// Delta accumulation (QA pass 23a): a late delta is added where its series stands (the stored
/// running value never goes down); an export whose write failed is taken back, so its retry
/// counts once; a delta histogram's `_min`/`_max` are the least and greatest seen, not sums.
#[test]
fn deltas_fold_in_time_order_roll_back_and_keep_extremes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig { max_future_ns: None, ..Default::default() }).unwrap();
    let deltas = Mutex::new(DeltaState::default());
    let sum = |v: f64, t: u64| {
        metric(
            "reqs",
            metric::Data::Sum(Sum {
                data_points: vec![num(t, v, vec![])],
                aggregation_temporality: AggregationTemporality::Delta as i32,
                is_monotonic: true,
            }),
        )
    };
    let export = |m: Metric| convert(&store, &deltas, request(Some("n"), vec![m]), 1000, 100).unwrap();
    assert_eq!(find(&export(sum(1.0, T)), "reqs", None), vec![(T as i64, 1.0)]);
    assert_eq!(find(&export(sum(1.0, T + 30)), "reqs", None), vec![(T as i64 + 30, 2.0)]);
    // Arrives after the one at T + 30: added at T + 30 (it was stored at T + 10 as 3, above
    // the 2 at T + 30 — a counter that went down).
    assert_eq!(find(&export(sum(1.0, T + 10)), "reqs", None), vec![(T as i64 + 30, 3.0)]);
    // Refused by the store three times, then accepted: counted once.
    for _ in 0..3 {
        let refused = export(sum(1.0, T + 40));
        assert_eq!(find(&refused, "reqs", None), vec![(T as i64 + 40, 4.0)]);
        deltas.lock().unwrap().rollback(refused.undo);
    }
    assert_eq!(find(&export(sum(1.0, T + 40)), "reqs", None), vec![(T as i64 + 40, 4.0)]);
    // A failed export whose series another export moved on from since keeps its delta (the
    // later export wrote a total holding it: a lower one would read as a reset); a series it
    // created is removed.
    let failed = export(sum(5.0, T + 50));
    assert_eq!(find(&export(sum(1.0, T + 60)), "reqs", None), vec![(T as i64 + 60, 10.0)]);
    deltas.lock().unwrap().rollback(failed.undo);
    assert_eq!(find(&export(sum(1.0, T + 70)), "reqs", None), vec![(T as i64 + 70, 11.0)]);
    let fresh = metric(
        "fresh",
        metric::Data::Sum(Sum {
            data_points: vec![num(T, 2.0, vec![])],
            aggregation_temporality: AggregationTemporality::Delta as i32,
            is_monotonic: true,
        }),
    );
    let failed = convert(&store, &deltas, request(Some("n"), vec![fresh.clone()]), 1000, 100).unwrap();
    deltas.lock().unwrap().rollback(failed.undo);
    let again = convert(&store, &deltas, request(Some("n"), vec![fresh]), 1000, 100).unwrap();
    assert_eq!(find(&again, "fresh", None), vec![(T as i64, 2.0)]);

    let hist = |t: u64, min: f64, max: f64| {
        metric(
            "lat",
            metric::Data::Histogram(Histogram {
                data_points: vec![HistogramDataPoint {
                    time_unix_nano: t,
                    count: 2,
                    sum: Some(min + max),
                    bucket_counts: vec![1, 1],
                    explicit_bounds: vec![1.5],
                    min: Some(min),
                    max: Some(max),
                    ..Default::default()
                }],
                aggregation_temporality: AggregationTemporality::Delta as i32,
            }),
        )
    };
    export(hist(T, 1.0, 2.0));
    let c = export(hist(T + 10, 1.0, 2.0));
    assert_eq!(find(&c, "lat_min", None), vec![(T as i64 + 10, 1.0)], "not 2");
    assert_eq!(find(&c, "lat_max", None), vec![(T as i64 + 10, 2.0)], "not 4");
    assert_eq!(find(&c, "lat_count", None), vec![(T as i64 + 10, 4.0)]);
    assert_eq!(find(&c, "lat_sum", None), vec![(T as i64 + 10, 6.0)]);
    let c = export(hist(T + 20, 0.5, 9.0));
    assert_eq!(find(&c, "lat_min", None), vec![(T as i64 + 20, 0.5)]);
    assert_eq!(find(&c, "lat_max", None), vec![(T as i64 + 20, 9.0)]);
}
