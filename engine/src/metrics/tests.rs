//! Tests of the catalog as a whole.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::{Error, ErrorKind};

/// Every family the issue requires the catalog to recognise.
const REQUIRED: &[&str] = &[
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_PROF_NVLINK_TX_BYTES",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "node_infiniband_port_data_transmitted_bytes_total",
    "node_infiniband_port_data_received_bytes_total",
    "node_infiniband_port_packets_transmitted_total",
    "node_infiniband_port_packets_received_total",
    "node_infiniband_symbol_error_total",
    "node_infiniband_port_errors_received_total",
    "node_infiniband_link_downed_total",
    "node_infiniband_link_error_recovery_total",
    "node_infiniband_port_discards_transmitted_total",
    "node_infiniband_port_transmit_wait_total",
    "node_infiniband_state_id",
    "node_infiniband_rate_bytes_per_second",
    "node_infiniband_out_of_sequence_packets_received_total",
    "node_infiniband_packet_sequence_errors_total",
    "node_infiniband_local_ack_timeout_errors_total",
    "node_infiniband_duplicate_requests_packets_total",
    "node_infiniband_np_cnp_packets_sent_total",
    "node_infiniband_rp_cnp_packets_handled_total",
    "node_infiniband_np_ecn_marked_roce_packets_received_total",
    "node_infiniband_out_of_buffer_drops_total",
    "infiniband_switch_port_symbol_error_total",
    "infiniband_switch_port_receive_errors_total",
    "infiniband_switch_port_transmit_discards_total",
    "infiniband_switch_port_transmit_wait_total",
    "infiniband_switch_port_link_downed_total",
    "infiniband_switch_port_link_error_recovery_total",
    "infiniband_switch_port_transmit_data_bytes_total",
    "infiniband_switch_port_receive_data_bytes_total",
    "node_pressure_cpu_waiting_seconds_total",
    "node_cpu_seconds_total",
    "node_load1",
    "node_disk_read_time_seconds_total",
    "node_disk_reads_completed_total",
    "nccl_collective_exec_time_microseconds",
    "nccl_bus_bandwidth_gbs",
    "train_step_duration_seconds",
    "dataloader_wait_seconds",
    "checkpoint_write_duration_seconds",
    "storage_read_latency_seconds",
    "storage_write_latency_seconds",
    "storage_read_bytes_total",
    "storage_write_bytes_total",
    "storage_queue_depth",
];

fn key(metric: &str, labels: &[(&str, &str)]) -> SeriesKey {
    SeriesKey::new(metric, labels.iter().copied())
}

#[test]
fn builtin_recognises_every_required_family() {
    let c = MetricCatalog::builtin();
    for family in REQUIRED {
        let info = c.get(family).unwrap_or_else(|| panic!("{family} missing"));
        assert!(!info.meaning.is_empty(), "{family} has no meaning");
        assert!(info.scale > 0.0);
        if info.counter_width.is_some() {
            assert_eq!(info.kind, MetricKind::Counter, "{family}: width on a gauge");
        }
    }
}

#[test]
fn data_unit_scale_is_four_only_for_switch_exporter() {
    let c = MetricCatalog::builtin();
    let sw = c.get("infiniband_switch_port_transmit_data_bytes_total").unwrap();
    let hca = c.get("node_infiniband_port_data_transmitted_bytes_total").unwrap();
    assert_eq!((sw.scale, sw.unit.as_str()), (4.0, "bytes"));
    assert_eq!((hca.scale, hca.unit.as_str()), (1.0, "bytes"));
    // 1000 words on the switch = 4000 bytes; 4000 bytes on the HCA stay 4000 bytes.
    assert_eq!(sw.increase(0.0, 1000.0), 4000.0);
    assert_eq!(hca.increase(0.0, 4000.0), 4000.0);
}

#[test]
fn fabric_facts_are_recorded() {
    let c = MetricCatalog::builtin();
    let get = |f: &str| c.get(f).unwrap();
    assert_eq!(get("node_infiniband_np_cnp_packets_sent_total").direction, Some(Direction::NotificationPoint));
    assert_eq!(get("node_infiniband_rp_cnp_packets_handled_total").direction, Some(Direction::ReactionPoint));
    let wait = get("infiniband_switch_port_transmit_wait_total");
    assert_eq!(wait.compare, Comparison::OwnBaseline);
    assert_eq!(wait.counter_width, Some(CounterWidth::saturate(32)));
    assert_eq!(get("node_infiniband_symbol_error_total").counter_bits(), Some(16));
    assert_eq!(
        get("node_infiniband_out_of_sequence_packets_received_total").counter_width,
        Some(CounterWidth::wrap(32))
    );
    assert_eq!(get("node_infiniband_out_of_buffer_drops_total").class, MetricClass::HostPcie);
    assert_eq!(get("DCGM_FI_PROF_NVLINK_TX_BYTES").kind, MetricKind::Gauge);
    assert_eq!(get("node_infiniband_link_downed_total").class, MetricClass::LinkFlaps);
}

#[test]
fn wrap_on_a_catalog_counter_is_not_negative() {
    let c = MetricCatalog::builtin();
    let oos = c.get("node_infiniband_out_of_sequence_packets_received_total").unwrap();
    assert_eq!(oos.increase(4_294_967_290.0, 4.0), 10.0);
    // A saturating 16-bit counter that decreased was cleared: counts since the clear.
    let sym = c.get("node_infiniband_symbol_error_total").unwrap();
    assert_eq!(sym.increase(65_535.0, 2.0), 2.0);
    // A switch serving 32-bit PortXmitData under the 64-bit name: a 32-bit wrap, in words,
    // scaled to bytes once.
    let data = c.get("infiniband_switch_port_transmit_data_bytes_total").unwrap();
    assert_eq!(data.increase(4_294_967_000.0, 704.0), 4_000.0);
    // A small drop is a reset (counts since the reset), and above 2^32 a drop is a reset too.
    assert_eq!(data.increase(1_000.0, 10.0), 40.0);
    assert_eq!(data.increase(9_000_000_000.0, 10.0), 40.0);
}

#[test]
fn classify_handles_histogram_and_summary_parts() {
    let c = MetricCatalog::builtin();
    let k = key("train_step_duration_seconds_sum", &[("host", "n1"), ("job", "j")]);
    let cl = c.classify(&k).unwrap();
    assert_eq!(cl.info.family, "train_step_duration_seconds");
    assert_eq!((cl.part, cl.kind(), cl.unit()), (SeriesPart::Sum, MetricKind::Counter, "seconds"));
    let cl = c.classify_metric("storage_read_latency_seconds_count").unwrap();
    assert_eq!((cl.part, cl.unit()), (SeriesPart::Count, "observations"));
    let cl = c.classify_metric("node_load1").unwrap();
    assert_eq!((cl.part, cl.kind()), (SeriesPart::Value, MetricKind::Gauge));
    assert!(c.classify_metric("no_such_metric_sum").is_none());
}

#[test]
fn entities_of_each_exporter() {
    let c = MetricCatalog::builtin();
    let e = |m: &str, l: &[(&str, &str)]| c.entity(&key(m, l)).unwrap();
    let dcgm = e("DCGM_FI_DEV_GPU_UTIL", &[("host", "node-03"), ("gpu", "5"), ("device", "nvidia5")]);
    assert_eq!((dcgm.kind, dcgm.name.as_str()), (EntityKind::Gpu, "node-03/gpu5"));
    let nic = e("node_infiniband_symbol_error_total", &[("host", "node-03"), ("device", "mlx5_2"), ("port", "1")]);
    assert_eq!((nic.kind, nic.name.as_str()), (EntityKind::NicPort, "node-03/mlx5_2:1"));
    let sw = e(
        "infiniband_switch_port_symbol_error_total",
        &[("host", "mgmt-1"), ("switch", "leaf-2"), ("port", "17"), ("guid", "0x1")],
    );
    assert_eq!((sw.kind, sw.name.as_str()), (EntityKind::SwitchPort, "leaf-2:17"));
    assert_eq!(e("node_load1", &[("host", "node-03")]).name, "node-03");
    assert_eq!(
        e("storage_read_latency_seconds", &[("host", "mds-1"), ("pool", "lustre-a"), ("quantile", "0.99")]).name,
        "lustre-a"
    );
    assert_eq!(
        e("train_step_duration_seconds", &[("host", "node-03"), ("job", "llm-70b"), ("rank", "3")]).name,
        "llm-70b"
    );
    let nccl = e("nccl_bus_bandwidth_gbs", &[("host", "node-03"), ("gpu", "GPU4")]);
    assert_eq!(nccl.name, "node-03/gpu4");
    let guids = std::collections::HashMap::from([("0xabc".to_owned(), "spine-1".to_owned())]);
    let k = key("infiniband_switch_port_transmit_wait_total", &[("host", "mgmt"), ("guid", "0xABC"), ("port", "4")]);
    assert_eq!(c.entity_with_guids(&k, &guids).unwrap().name, "spine-1:4");
}

#[test]
fn toml_extends_and_overrides() {
    let mut c = MetricCatalog::builtin();
    let before = c.len();
    let n = c
        .extend_from_toml(
            r#"
[[metric]]
family = "infiniband_switch_port_transmit_data_bytes_total"
domain = "network"
kind = "counter"
unit = "bytes"
class = "throughput"
entity = "switch_port"
meaning = "data bytes sent (exporter release that already multiplies by 4)"
scale = 1.0
counter_bits = 64
direction = "transmit"

[[metric]]
family = "site_fabric_credit_stalls_total"
domain = "network"
kind = "counter"
unit = "ticks"
class = "congestion"
entity = "nic_port"
meaning = "credit stalls"
counter_bits = 32
overflow = "saturate"
compare = "own_baseline"
source = "site"
"#,
        )
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(c.len(), before + 1);
    assert_eq!(c.get("infiniband_switch_port_transmit_data_bytes_total").unwrap().scale, 1.0);
    let site = c.get("site_fabric_credit_stalls_total").unwrap();
    assert_eq!(site.counter_width, Some(CounterWidth::saturate(32)));
    assert_eq!((site.source.as_str(), site.compare), ("site", Comparison::OwnBaseline));
}

#[test]
fn toml_errors_are_typed_and_change_nothing() {
    let mut c = MetricCatalog::builtin();
    let before = c.len();
    let cases = [
        // Syntax error.
        "[[metric]\nfamily = 1",
        // Unknown key (typo).
        "[[metric]]\nfamily=\"a\"\ndomain=\"network\"\nkind=\"gauge\"\nunit=\"u\"\nclass=\"drops\"\nentity=\"node\"\nmeaning=\"m\"\nscael=4.0",
        // Unknown domain.
        "[[metric]]\nfamily=\"a\"\ndomain=\"gpu\"\nkind=\"gauge\"\nunit=\"u\"\nclass=\"drops\"\nentity=\"node\"\nmeaning=\"m\"",
        // Width on a gauge.
        "[[metric]]\nfamily=\"a\"\ndomain=\"network\"\nkind=\"gauge\"\nunit=\"u\"\nclass=\"drops\"\nentity=\"node\"\nmeaning=\"m\"\ncounter_bits=16",
        // Bad name and bad scale.
        "[[metric]]\nfamily=\"9a\"\ndomain=\"network\"\nkind=\"gauge\"\nunit=\"u\"\nclass=\"drops\"\nentity=\"node\"\nmeaning=\"m\"",
        "[[metric]]\nfamily=\"a\"\ndomain=\"network\"\nkind=\"gauge\"\nunit=\"u\"\nclass=\"drops\"\nentity=\"node\"\nmeaning=\"m\"\nscale=0.0",
    ];
    for text in cases {
        let err = c.extend_from_toml(text).unwrap_err();
        assert!(matches!(err, Error::MetricCatalogInvalid { .. }), "{text}: {err}");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    }
    assert_eq!(c.len(), before);
}

#[test]
fn enum_names_round_trip() {
    for d in Domain::ALL {
        assert_eq!(Domain::parse(d.as_str()), Some(*d));
    }
    for k in MetricClass::ALL {
        assert_eq!(MetricClass::parse(k.as_str()), Some(*k));
    }
    assert_eq!(EntityKind::NicPort.to_string(), "nic_port");
}
