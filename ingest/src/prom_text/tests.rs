//! Parser tests, and real exporter output (hand-written from the exporters' documented
//! formats under `ingest/tests/data/exporters/`) checked through the metric catalog.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use lockstep_engine::metrics::{
    Baseline, Direction, Domain, EntityKind, MetricCatalog, MetricKind, SeriesPart, ThrottleReasons, counter_step,
};

use super::*;

const DCGM: &str = include_str!("../../tests/data/exporters/dcgm.prom");
const HCA_1: &str = include_str!("../../tests/data/exporters/node_infiniband_scrape1.prom");
const HCA_2: &str = include_str!("../../tests/data/exporters/node_infiniband_scrape2.prom");
const SWITCH_1: &str = include_str!("../../tests/data/exporters/infiniband_exporter_scrape1.prom");
const SWITCH_2: &str = include_str!("../../tests/data/exporters/infiniband_exporter_scrape2.prom");
const SWITCH_JOINED: &str = include_str!("../../tests/data/exporters/infiniband_exporter_joined.prom");
const HOST: &str = include_str!("../../tests/data/exporters/node_host.prom");
const NCCL: &str = include_str!("../../tests/data/exporters/nccl_inspector.prom");
const LOCKSTEP: &str = include_str!("../../tests/data/exporters/lockstep.prom");

const T1: i64 = 1_709_294_400_000_000_000;
const T2: i64 = T1 + 10_000_000_000;

fn scrape(text: &str, host: &str, time: i64) -> Exposition {
    parse(text, &ParseOptions { default_host: Some(host), default_time_ns: time, openmetrics: false }).unwrap()
}

fn err(text: &str) -> PromTextError {
    parse(text, &ParseOptions { default_host: Some("h"), default_time_ns: 0, openmetrics: false }).unwrap_err()
}

/// The single sample of the series of `metric` whose labels include `labels`.
fn sample(e: &Exposition, metric: &str, labels: &[(&str, &str)]) -> (SeriesKey, f64, i64) {
    let mut hits = e.batch.series.iter().filter(|(k, _)| {
        k.metric == metric && labels.iter().all(|(n, v)| k.labels.get(n).map(|v| v.as_str()) == Some(*v))
    });
    let (k, s) = hits.next().unwrap_or_else(|| panic!("no {metric}{labels:?}"));
    assert!(hits.next().is_none(), "{metric}{labels:?} is ambiguous");
    (k.clone(), s.values[0], s.timestamps[0])
}

/// Normalised increase of a catalog counter between two scrapes.
fn increase(c: &MetricCatalog, a: &Exposition, b: &Exposition, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let info = c.get(metric).unwrap();
    info.increase(sample(a, metric, labels).1, sample(b, metric, labels).1)
}

/// Every series of an exposition is known to the catalog (info metrics excepted).
fn assert_all_classified(c: &MetricCatalog, e: &Exposition) {
    for (k, _) in &e.batch.series {
        if k.metric.ends_with("_info") {
            continue;
        }
        assert!(c.classify(k).is_some(), "{} is not in the catalog", k.metric);
    }
}

#[test]
fn parses_metadata_labels_escapes_and_special_values() {
    let text = "# HELP m_total A \\\\ help\\nline.\n# TYPE m_total counter\n\
                # just a comment\n\n\
                m_total{a=\"x\\\"y\\\\z\\nw\", b = \"\" ,} +Inf 1500\r\n\
                  m_total { a=\"2\"}\tNaN\n\
                other -1.5e3\n\
                # EOF\n";
    let e = scrape(text, "node-03", 7);
    assert_eq!(
        e.families,
        vec![FamilyMeta {
            name: "m_total".into(),
            help: Some("A \\ help\nline.".into()),
            family_type: Some(FamilyType::Counter),
        }]
    );
    let (k, v, t) = sample(&e, "m_total", &[("a", "x\"y\\z\nw")]);
    assert_eq!((v, t), (f64::INFINITY, 1_500_000_000));
    assert_eq!(k.host(), Some("node-03"));
    assert!(!k.labels.contains_key("b"), "empty label values are absent");
    let (_, v, t) = sample(&e, "m_total", &[("a", "2")]);
    assert!(v.is_nan());
    assert_eq!(t, 7, "default time");
    assert_eq!(sample(&e, "other", &[]).1, -1500.0);
    // A host label in the sample wins over the default.
    let e = scrape("m{host=\"mds-1\"} 1\n", "node-03", 0);
    assert_eq!(e.batch.series[0].0.host(), Some("mds-1"));
}

#[test]
fn errors_name_the_line() {
    let cases: Vec<(&str, PromTextError)> = vec![
        ("ok 1\n9bad 1", PromTextError::InvalidMetricName { line: 2, name: "9bad".into() }),
        ("m{9x=\"1\"} 1", PromTextError::InvalidLabelName { line: 1, name: "9x".into() }),
        ("m{a=\"1\",a=\"2\"} 1", PromTextError::DuplicateLabel { line: 1, name: "a".into() }),
        ("m{a=\"\\t\"} 1", PromTextError::InvalidEscape { line: 1, escape: 't' }),
        ("\n\nm{a=\"1} 1", PromTextError::Malformed { line: 3, reason: "unterminated label value" }),
        ("m{a \"1\"} 1", PromTextError::Malformed { line: 1, reason: "expected '=' after a label name" }),
        ("m{a=1} 1", PromTextError::Malformed { line: 1, reason: "expected '\"' to open a label value" }),
        (
            "m{a=\"1\" b=\"2\"} 1",
            PromTextError::Malformed { line: 1, reason: "expected ',' or '}' after a label value" },
        ),
        ("m", PromTextError::Malformed { line: 1, reason: "missing sample value" }),
        ("m{a=\"1\"}1", PromTextError::Malformed { line: 1, reason: "expected a blank before the value" }),
        ("m one", PromTextError::InvalidValue { line: 1, value: "one".into() }),
        ("m 1 12.5", PromTextError::InvalidTimestamp { line: 1, value: "12.5".into() }),
        ("m 1 -5", PromTextError::InvalidTimestamp { line: 1, value: "-5".into() }),
        ("m 1 9223372036854775807", PromTextError::InvalidTimestamp { line: 1, value: "9223372036854775807".into() }),
        ("m 1 2 3", PromTextError::Malformed { line: 1, reason: "unexpected text after the timestamp" }),
        ("m 1\n# EOF\nm 2\n# EOF\n", PromTextError::Malformed { line: 3, reason: "content after `# EOF`" }),
        ("# TYPE m countr", PromTextError::InvalidType { line: 1, value: "countr".into() }),
        ("# HELP 1m x", PromTextError::InvalidMetricName { line: 1, name: "1m".into() }),
        // One series twice at the same time (the same labels in another order, the scrape's
        // time or an explicit one); at another time it is a second sample.
        (
            "m{a=\"1\",b=\"2\"} 1\nm{a=\"2\"} 1\nm{b=\"2\",a=\"1\"} 2",
            PromTextError::DuplicateSample { line: 3, first: 1, series: "m{a=\"1\",b=\"2\",host=\"h\"}".into() },
        ),
        (
            "m 1 1000\nm 2 2000\nm 3 1000",
            PromTextError::DuplicateSample { line: 3, first: 1, series: "m{host=\"h\"}".into() },
        ),
    ];
    for (text, want) in cases {
        assert_eq!(err(text), want, "{text:?}");
    }
    let e = parse("m 1", &ParseOptions { default_host: None, default_time_ns: 0, openmetrics: false }).unwrap_err();
    assert_eq!(e, PromTextError::MissingHost { line: 1, metric: "m".into() });
    let e = err("m{value=\"x\"} 1");
    assert!(matches!(e, PromTextError::InvalidSeries { line: 1, .. }), "{e}");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().starts_with("line 1: "), "{e}");
}

#[test]
fn dcgm_exporter_gpus_throttle_and_xid() {
    let c = MetricCatalog::builtin();
    let e = scrape(DCGM, "node-03", T1);
    assert_eq!(e.batch.len(), 20);
    assert_all_classified(&c, &e);
    let (k, v, _) = sample(&e, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", &[("gpu", "5")]);
    assert_eq!(c.entity(&k).unwrap().name, "node-03/gpu5");
    let reasons = ThrottleReasons::from_value(v).unwrap();
    assert!(reasons.thermal() && reasons.hw_slowdown() && !reasons.power());
    let (k, v, _) = sample(&e, "DCGM_FI_DEV_XID_ERRORS", &[("gpu", "5")]);
    assert_eq!(v, 79.0);
    assert_eq!(k.labels["err_msg"], "GPU has fallen off the bus");
    let (k0, _, _) = sample(&e, "DCGM_FI_DEV_XID_ERRORS", &[("gpu", "0")]);
    assert!(!k0.labels.contains_key("err_msg"), "empty label dropped");
    let (k, v, _) = sample(&e, "DCGM_FI_PROF_NVLINK_TX_BYTES", &[("gpu", "0")]);
    let cl = c.classify(&k).unwrap();
    assert_eq!((cl.kind(), cl.unit(), v), (MetricKind::Gauge, "bytes/s", 1.87564e11));
    assert_eq!(e.families.len(), 10);
}

#[test]
fn node_exporter_infiniband_and_roce_counters_normalise() {
    let c = MetricCatalog::builtin();
    let (a, b) = (scrape(HCA_1, "node-03", T1), scrape(HCA_2, "node-03", T2));
    assert_all_classified(&c, &a);
    let ib = [("device", "mlx5_0"), ("port", "1")];
    let roce = [("device", "mlx5_2"), ("port", "1")];
    let (k, _, t) = sample(&a, "node_infiniband_port_data_transmitted_bytes_total", &ib);
    assert_eq!((c.entity(&k).unwrap().name.as_str(), t), ("node-03/mlx5_0:1", T1));
    // Already bytes: scale 1, 125 GB in 10 s = 12.5 GB/s.
    let bytes = increase(&c, &a, &b, "node_infiniband_port_data_transmitted_bytes_total", &ib);
    assert_eq!(bytes / 10.0, 1.25e10);
    // 32-bit mlx5 queue counter wrapped: 4294967200 → 150 is +246, not negative.
    let oos = increase(&c, &a, &b, "node_infiniband_out_of_sequence_packets_received_total", &roce);
    assert_eq!(oos, 246.0);
    // 16-bit PMA counter pinned at 65535: a lower bound, flagged saturated.
    let sym = c.get("node_infiniband_symbol_error_total").unwrap();
    let step = counter_step(sample(&a, &sym.family, &ib).1, sample(&b, &sym.family, &ib).1, sym.counter_width);
    assert!(step.saturated && !step.wrapped && step.increase == 5.0);
    // Congestion direction: mlx5_2 is a notification point (receiver of congested flows).
    let np = c.get("node_infiniband_np_cnp_packets_sent_total").unwrap();
    assert_eq!(np.direction, Some(Direction::NotificationPoint));
    assert_eq!(increase(&c, &a, &b, &np.family, &roce), 80_000.0);
    assert_eq!(increase(&c, &a, &b, "node_infiniband_rp_cnp_packets_handled_total", &roce), 0.0);
    assert_eq!(increase(&c, &a, &b, "node_infiniband_link_downed_total", &ib), 1.0);
    assert_eq!(sample(&b, "node_infiniband_state_id", &roce).1, 1.0, "port went down");
}

#[test]
fn infiniband_exporter_words_times_four_exactly_once() {
    let c = MetricCatalog::builtin();
    let (a, b) = (scrape(SWITCH_1, "mgmt-1", T1), scrape(SWITCH_2, "mgmt-1", T2));
    assert_all_classified(&c, &a);
    // Switch names come from the exporter's own info metric (port series carry guid only).
    let guids: HashMap<String, String> = a
        .batch
        .series
        .iter()
        .filter(|(k, _)| k.metric == "infiniband_switch_info")
        .map(|(k, _)| (k.labels["guid"].to_string(), k.labels["switch"].to_string()))
        .collect();
    let port = [("guid", "0x7cfe9003009ce5b0"), ("port", "17")];
    let (k, _, _) = sample(&a, "infiniband_switch_port_transmit_data_bytes_total", &port);
    let entity = c.entity_with_guids(&k, &guids).unwrap();
    assert_eq!((entity.kind, entity.name.as_str()), (EntityKind::SwitchPort, "leaf-2:17"));
    // 31.25 G words × 4 = 125 GB in 10 s: the same 12.5 GB/s the HCA reports in bytes.
    let bytes = increase(&c, &a, &b, "infiniband_switch_port_transmit_data_bytes_total", &port);
    let hca = increase(
        &c,
        &scrape(HCA_1, "node-03", T1),
        &scrape(HCA_2, "node-03", T2),
        "node_infiniband_port_data_transmitted_bytes_total",
        &[("device", "mlx5_0"), ("port", "1")],
    );
    assert_eq!(bytes, 1.25e11);
    assert_eq!(bytes, hca);
    // Packets are not scaled.
    assert_eq!(increase(&c, &a, &b, "infiniband_switch_port_transmit_packets_total", &port), 3e7);
    // PortXmitWait against the port's own baseline of ~4.2M ticks per 10 s.
    let wait = [("guid", "0x506b4b03005c2740"), ("port", "3")];
    let rate = increase(&c, &a, &b, "infiniband_switch_port_transmit_wait_total", &wait) / 10.0;
    let baseline = Baseline::from_values(&[4.1e6, 4.3e6, 4.2e6, 4.0e6, 4.4e6]).unwrap();
    assert_eq!(rate, 9e7);
    assert!(baseline.score(rate) > 100.0 && baseline.ratio(rate) > 20.0);
}

#[test]
fn infiniband_exporter_joined_labels_and_saturation() {
    let c = MetricCatalog::builtin();
    let e = scrape(SWITCH_JOINED, "mgmt-1", T1);
    assert_eq!(e.batch.len(), 3);
    let (k, v, _) = sample(&e, "infiniband_switch_port_receive_errors_total", &[("switch", "leaf-2")]);
    assert_eq!(c.entity(&k).unwrap().name, "leaf-2:17");
    let info = c.classify(&k).unwrap().info;
    assert!(counter_step(v, v, info.counter_width).saturated, "16-bit PortRcvErrors pinned");
    let (k, v, _) = sample(&e, "infiniband_switch_port_link_error_recovery_total", &[]);
    let w = c.classify(&k).unwrap().info.counter_width;
    assert!(counter_step(v, v, w).saturated, "8-bit LinkErrorRecoveryCounter pinned at 255");
}

#[test]
fn node_exporter_host_metrics_describe_the_node() {
    let c = MetricCatalog::builtin();
    let e = scrape(HOST, "node-03", T1);
    assert_all_classified(&c, &e);
    for (k, _) in &e.batch.series {
        let entity = c.entity(k).unwrap();
        assert_eq!((entity.kind, entity.name.as_str()), (EntityKind::Node, "node-03"), "{k}");
    }
    let (k, _, _) = sample(&e, "node_pressure_cpu_waiting_seconds_total", &[]);
    assert_eq!(c.classify(&k).unwrap().info.domain, Domain::DataLoading);
    let (_, time, _) = sample(&e, "node_disk_read_time_seconds_total", &[("device", "nvme0n1")]);
    let (_, reads, _) = sample(&e, "node_disk_reads_completed_total", &[("device", "nvme0n1")]);
    assert!((time / reads - 8.74e-5).abs() < 1e-6, "mean read latency since boot");
}

#[test]
fn nccl_inspector_textfile() {
    let c = MetricCatalog::builtin();
    let e = scrape(NCCL, "node-03", T1);
    assert_eq!(e.batch.len(), 4);
    assert!(e.families.is_empty(), "the inspector writes no HELP/TYPE");
    let (k, v, _) = sample(&e, "nccl_bus_bandwidth_gbs", &[("comm_name", "TP \"shard\" 1")]);
    assert_eq!(v, 44.1181);
    assert_eq!(c.entity(&k).unwrap().name, "node-03/gpu5");
    let info = c.classify(&k).unwrap().info;
    assert_eq!((info.domain, info.unit.as_str()), (Domain::Collective, "GB/s"));
    let (_, us, _) = sample(&e, "nccl_collective_exec_time_microseconds", &[("gpu", "GPU0")]);
    assert_eq!(us, 1447.12);
}

#[test]
fn lockstep_application_and_storage_families() {
    let c = MetricCatalog::builtin();
    let e = scrape(LOCKSTEP, "node-03", 0);
    assert_all_classified(&c, &e);
    let (k, v, t) = sample(&e, "train_step_duration_seconds", &[("rank", "1")]);
    assert_eq!((v, t), (1.047, T1), "ms timestamps become ns");
    assert_eq!(c.entity(&k).unwrap().name, "llm-70b");
    let (k, _, _) = sample(&e, "checkpoint_write_duration_seconds_bucket", &[("le", "+Inf")]);
    let cl = c.classify(&k).unwrap();
    assert_eq!((cl.part, cl.kind()), (SeriesPart::Bucket, MetricKind::Counter));
    let (k, v, _) = sample(&e, "storage_read_latency_seconds", &[("quantile", "1")]);
    assert!(v.is_nan());
    assert_eq!(c.entity(&k).unwrap().name, "lustre-a");
    assert_eq!(sample(&e, "storage_write_latency_seconds", &[]).1, f64::INFINITY);
    let (k, _, _) = sample(&e, "storage_queue_depth", &[]);
    assert_eq!(k.host(), Some("mds-1"));
    let (k, _, _) = sample(&e, "dataloader_wait_seconds", &[]);
    assert_eq!(c.entity(&k).unwrap().name, "node-03");
    assert_eq!(e.families.len(), 8);
}

/// Damaged exporter output (every line of the real exporter samples cut short, bytes deleted,
/// duplicated or replaced by characters the grammar cares about, in both the Prometheus and
/// the OpenMetrics dialect) is parsed or refused with an error naming a line; never a panic.
#[test]
fn damaged_exposition_text_never_panics() {
    const SPECIAL: &[&str] = &["{", "}", "\"", "\\", ",", "=", " ", "\n", "#", "e", "+Inf", "NaN", "é", "\u{0}", "9"];
    let mut cases = 0usize;
    for text in [DCGM, HCA_1, SWITCH_1, SWITCH_JOINED, HOST, NCCL, LOCKSTEP] {
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        // Every 7th character position, each mutation (a small deterministic walk over the text).
        for (n, &(at, ch)) in chars.iter().enumerate().step_by(7) {
            let end = at + ch.len_utf8();
            let special = SPECIAL[n % SPECIAL.len()];
            let damaged = [
                format!("{}{}", &text[..at], &text[end..]),
                format!("{}{special}{}", &text[..at], &text[end..]),
                format!("{}{special}{}", &text[..at], &text[at..]),
                text[..at].to_string(),
            ];
            for d in &damaged {
                for openmetrics in [false, true] {
                    let options = ParseOptions { default_host: Some("h"), default_time_ns: T1, openmetrics };
                    let outcome = std::panic::catch_unwind(|| parse(d, &options).map(|_| ()));
                    match outcome {
                        Err(_) => panic!("parse panicked on {d:?}"),
                        Ok(Err(e)) => assert!(e.to_string().contains("line"), "{e}"),
                        Ok(Ok(())) => {}
                    }
                    cases += 1;
                }
            }
        }
    }
    assert!(cases > 1000, "{cases}");
}

/// OpenMetrics exemplars (`# {labels} value [timestamp]` after a sample, as instrumented Go
/// and Java clients write them) are checked and skipped, the samples kept; a malformed one is
/// an error naming it; in the Prometheus text format, which has none, the text after the value
/// is an error that says so (it spoke of a timestamp there was not).
#[test]
fn openmetrics_exemplars_are_skipped() {
    let om =
        |text: &str| parse(text, &ParseOptions { default_host: Some("h"), default_time_ns: T1, openmetrics: true });
    let text = "# TYPE c counter\nc_total 1 # {trace_id=\"x\"} 1\n\
                # TYPE d histogram\nd_bucket{le=\"1\"} 2 1709294400.5 # {trace_id=\"a b#}\"} 0.5 1709294400.25\n\
                d_bucket{le=\"+Inf\"} 3 # {} 7\n# EOF\n";
    let e = om(text).unwrap();
    assert_eq!(sample(&e, "c_total", &[]).1, 1.0);
    assert_eq!(sample(&e, "d_bucket", &[("le", "1")]).1, 2.0);
    assert_eq!(sample(&e, "d_bucket", &[("le", "1")]).2, T1 + 500_000_000);
    assert_eq!(sample(&e, "d_bucket", &[("le", "+Inf")]).1, 3.0);
    let malformed = PromTextError::Malformed { line: 1, reason: "malformed exemplar (`# {labels} value [timestamp]`)" };
    for bad in [
        "c 1 # trace 1\n# EOF\n",
        "c 1 # {a=\"b\"}\n# EOF\n",
        "c 1 # {a=\"b\"} 1 2 3\n# EOF\n",
        "c 1 # {a=\"b\"} x\n# EOF\n",
    ] {
        assert_eq!(om(bad).unwrap_err(), malformed, "{bad:?}");
    }
    assert_eq!(
        err("c 1 # {a=\"b\"} 1"),
        PromTextError::Malformed { line: 1, reason: "unexpected text after the value" }
    );
}
