//! The built-in metric families (documented in `docs/metrics.md`).

use crate::metrics::{
    Comparison, CounterWidth, Direction, Domain, EntityKind, MetricClass, MetricInfo, MetricKind, names,
};

use Comparison::OwnBaseline;
use Direction::{NotificationPoint, ReactionPoint, Receive, Transmit};
use EntityKind::{Gpu, Job, NicPort, Node, StoragePool, SwitchPort};
use MetricClass as C;
use MetricKind::{Counter, Gauge};

const DCGM: &str = "dcgm-exporter";
const NODE: &str = "node_exporter";
const IBX: &str = "infiniband_exporter";
const NCCL: &str = "nccl-inspector";
const LOCKSTEP: &str = "lockstep";

const PMA: &str = "InfiniBand PMA PortCounters field: saturates at its maximum (counter_bits) \
                   until cleared (perfquery -R); a pinned counter hides further errors";
const XMIT_WAIT: &str = "PortXmitWait: ticks in which the port had data to send but no \
    flow-control credits; the tick length is hardware-specific, so compare a port only with \
    its own baseline; rising waits point downstream (slow receiver or congestion tree)";
const DATA_HCA: &str = "the HCA counts 4-octet words; node_exporter (procfs) already \
    multiplies by 4, so values are bytes and scale is 1; 64-bit extended counter";
const DATA_SWITCH: &str = "raw PortXmitData/PortRcvData from perfquery: 4-octet words \
    (octets/4) despite the _bytes name, so scale is 4; exporter releases that multiply by 4 \
    themselves need scale = 1.0 in a TOML override; 64-bit extended counter";
const MLX5_Q: &str = "mlx5 queue counter (hw_counters, RoCE and InfiniBand): 32 bits, wraps";
const MLX5_CC: &str = "mlx5 RoCE congestion-control counter (ECN/DCQCN), 64 bits";
const PROF_RATE: &str = "DCGM profiling field exported as a gauge: already a rate in bytes \
    per second averaged over the sample period, not a counter";

/// One built-in family, in const form.
struct Spec {
    family: &'static str,
    source: &'static str,
    domain: Domain,
    kind: MetricKind,
    unit: &'static str,
    class: MetricClass,
    entity: EntityKind,
    meaning: &'static str,
    scale: f64,
    width: Option<CounterWidth>,
    direction: Option<Direction>,
    compare: Comparison,
    facts: &'static str,
}

impl Spec {
    #[allow(clippy::too_many_arguments)]
    const fn new(
        family: &'static str,
        source: &'static str,
        domain: Domain,
        kind: MetricKind,
        unit: &'static str,
        class: MetricClass,
        entity: EntityKind,
        meaning: &'static str,
    ) -> Spec {
        Spec {
            family,
            source,
            domain,
            kind,
            unit,
            class,
            entity,
            meaning,
            scale: 1.0,
            width: None,
            direction: None,
            compare: Comparison::Absolute,
            facts: "",
        }
    }
    const fn scale(self, scale: f64) -> Spec {
        Spec { scale, ..self }
    }
    const fn sat(self, bits: u8) -> Spec {
        Spec { width: Some(CounterWidth::saturate(bits)), ..self }
    }
    const fn wrap(self, bits: u8) -> Spec {
        Spec { width: Some(CounterWidth::wrap(bits)), ..self }
    }
    const fn dir(self, direction: Direction) -> Spec {
        Spec { direction: Some(direction), ..self }
    }
    const fn own(self) -> Spec {
        Spec { compare: OwnBaseline, ..self }
    }
    const fn facts(self, facts: &'static str) -> Spec {
        Spec { facts, ..self }
    }
}

const fn dcgm(family: &'static str, unit: &'static str, class: C, meaning: &'static str) -> Spec {
    Spec::new(family, DCGM, Domain::Compute, Gauge, unit, class, Gpu, meaning)
}

const fn hca(family: &'static str, kind: MetricKind, unit: &'static str, class: C, meaning: &'static str) -> Spec {
    Spec::new(family, NODE, Domain::Network, kind, unit, class, NicPort, meaning)
}

const fn sw(family: &'static str, unit: &'static str, class: C, meaning: &'static str) -> Spec {
    Spec::new(family, IBX, Domain::Network, Counter, unit, class, SwitchPort, meaning)
}

const fn host(
    family: &'static str,
    domain: Domain,
    kind: MetricKind,
    unit: &'static str,
    class: C,
    meaning: &'static str,
) -> Spec {
    Spec::new(family, NODE, domain, kind, unit, class, Node, meaning)
}

const fn nccl(family: &'static str, unit: &'static str, class: C, meaning: &'static str) -> Spec {
    Spec::new(family, NCCL, Domain::Collective, Gauge, unit, class, Gpu, meaning)
}

#[allow(clippy::too_many_arguments)]
const fn app(
    family: &'static str,
    domain: Domain,
    kind: MetricKind,
    unit: &'static str,
    class: C,
    entity: EntityKind,
    meaning: &'static str,
) -> Spec {
    Spec::new(family, LOCKSTEP, domain, kind, unit, class, entity, meaning)
}

#[rustfmt::skip]
const SPECS: &[Spec] = &[
    // dcgm-exporter (label gpu; entity {host}/gpu{gpu}).
    dcgm(names::GPU_UTIL, "percent", C::Utilization,
        "share of the sample period in which any kernel ran on the GPU (coarse)"),
    dcgm(names::SM_ACTIVE, "ratio", C::Utilization,
        "fraction of cycles an SM had at least one warp assigned, averaged over all SMs"),
    dcgm("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "ratio", C::Utilization,
        "fraction of cycles the tensor (HMMA) pipes were active"),
    dcgm("DCGM_FI_DEV_SM_CLOCK", "MHz", C::Clock, "SM clock frequency"),
    dcgm("DCGM_FI_DEV_GPU_TEMP", "celsius", C::Temperature, "GPU die temperature"),
    dcgm("DCGM_FI_DEV_POWER_USAGE", "watts", C::Power, "GPU power draw"),
    dcgm(names::THROTTLE_REASONS, "bitmask", C::Throttle,
        "why clocks are held down: decode with ThrottleReasons (thermal, power, hw slowdown)")
        .facts("NVML nvmlClocksThrottleReasons: 0x1 idle, 0x2 app clocks, 0x4 sw power cap, \
                0x8 hw slowdown, 0x10 sync boost, 0x20 sw thermal, 0x40 hw thermal, \
                0x80 hw power brake, 0x100 display clocks"),
    dcgm(names::CLOCKS_EVENT_REASONS, "bitmask", C::Throttle,
        "newer DCGM name of DCGM_FI_DEV_CLOCK_THROTTLE_REASONS (same bits)"),
    dcgm("DCGM_FI_DEV_XID_ERRORS", "xid", C::DeviceErrors,
        "code of the last XID error the driver reported for this GPU")
        .facts("a gauge holding the last XID code, not a count: a change of value (or a \
                non-zero value appearing) marks a new error; 79 = fell off the bus, \
                48 = double-bit ECC, 74 = NVLink error"),
    dcgm("DCGM_FI_PROF_NVLINK_TX_BYTES", "bytes/s", C::Throughput,
        "NVLink bytes transmitted per second, headers and payload")
        .dir(Transmit).facts(PROF_RATE),
    dcgm("DCGM_FI_PROF_NVLINK_RX_BYTES", "bytes/s", C::Throughput,
        "NVLink bytes received per second, headers and payload")
        .dir(Receive).facts(PROF_RATE),
    dcgm("DCGM_FI_PROF_PCIE_TX_BYTES", "bytes/s", C::HostPcie,
        "PCIe bytes transmitted per second by the GPU, headers and payload")
        .dir(Transmit).facts(PROF_RATE),
    dcgm("DCGM_FI_PROF_PCIE_RX_BYTES", "bytes/s", C::HostPcie,
        "PCIe bytes received per second by the GPU, headers and payload")
        .dir(Receive).facts(PROF_RATE),
    // node_exporter InfiniBand port counters (labels device, port).
    hca("node_infiniband_port_data_transmitted_bytes_total", Counter, "bytes", C::Throughput,
        "data bytes sent by the HCA port").wrap(64).dir(Transmit).facts(DATA_HCA),
    hca("node_infiniband_port_data_received_bytes_total", Counter, "bytes", C::Throughput,
        "data bytes received by the HCA port").wrap(64).dir(Receive).facts(DATA_HCA),
    hca("node_infiniband_port_packets_transmitted_total", Counter, "packets", C::Throughput,
        "packets sent on all VLs").wrap(64).dir(Transmit),
    hca("node_infiniband_port_packets_received_total", Counter, "packets", C::Throughput,
        "packets received on all VLs, errors included").wrap(64).dir(Receive),
    hca("node_infiniband_symbol_error_total", Counter, "errors", C::PhysicalErrors,
        "minor bit errors on the physical lanes (bad cable, optic or connector)")
        .sat(16).dir(Receive).facts(PMA),
    hca("node_infiniband_port_errors_received_total", Counter, "packets", C::PhysicalErrors,
        "received packets with errors (CRC, malformed), dropped by the port")
        .sat(16).dir(Receive).facts(PMA),
    hca("node_infiniband_port_receive_remote_physical_errors_total", Counter, "packets",
        C::PhysicalErrors, "packets received marked bad by an upstream hop (EBP)")
        .sat(16).dir(Receive).facts(PMA),
    hca("node_infiniband_local_link_integrity_errors_total", Counter, "events",
        C::PhysicalErrors, "times local physical errors exceeded the LocalPhyErrors threshold")
        .sat(4).facts(PMA),
    hca("node_infiniband_excessive_buffer_overrun_errors_total", Counter, "events", C::Drops,
        "consecutive flow-control periods with receive buffer overruns")
        .sat(4).dir(Receive).facts(PMA),
    hca("node_infiniband_link_downed_total", Counter, "events", C::LinkFlaps,
        "times the link failed error recovery and went down").sat(8).facts(PMA),
    hca("node_infiniband_link_error_recovery_total", Counter, "events", C::LinkFlaps,
        "times the link retrained successfully after an error").sat(8).facts(PMA),
    hca("node_infiniband_port_discards_transmitted_total", Counter, "packets", C::Drops,
        "outbound packets discarded because the port was down or congested")
        .sat(16).dir(Transmit).facts(PMA),
    hca("node_infiniband_port_transmit_wait_total", Counter, "ticks", C::Congestion,
        "ticks the port had data to send but no credits").sat(32).dir(Transmit).own()
        .facts(XMIT_WAIT),
    hca("node_infiniband_vl15_dropped_total", Counter, "packets", C::Drops,
        "incoming management (VL15) packets dropped for lack of resources")
        .sat(16).dir(Receive).facts(PMA),
    hca("node_infiniband_state_id", Gauge, "state", C::LinkState,
        "logical port state: 1 down, 2 init, 3 armed, 4 active, 5 active defer"),
    hca("node_infiniband_physical_state_id", Gauge, "state", C::LinkState,
        "physical port state: 2 polling, 3 disabled, 5 link up, 6 link error recovery"),
    hca("node_infiniband_rate_bytes_per_second", Gauge, "bytes/s", C::LinkState,
        "negotiated signalling rate; a drop means the link trained down (width or speed)"),
    // node_exporter RoCE / mlx5 hardware counters.
    hca("node_infiniband_out_of_sequence_packets_received_total", Counter, "packets",
        C::LossRetransmit, "packets received out of sequence: something was lost upstream")
        .wrap(32).dir(Receive).facts(MLX5_Q),
    hca("node_infiniband_packet_sequence_errors_total", Counter, "packets", C::LossRetransmit,
        "NAK-sequence-error packets received: the remote saw a gap and this sender retransmits")
        .wrap(32).dir(Transmit).facts(MLX5_Q),
    hca("node_infiniband_implied_nak_seq_errors_total", Counter, "events", C::LossRetransmit,
        "implied NAK sequence errors on RDMA read responses").wrap(32).dir(Transmit)
        .facts(MLX5_Q),
    hca("node_infiniband_local_ack_timeout_errors_total", Counter, "events", C::LossRetransmit,
        "sender ack timer expiries: a retransmit after a timeout, a stall of milliseconds")
        .wrap(32).dir(Transmit).facts(MLX5_Q),
    hca("node_infiniband_duplicate_requests_packets_total", Counter, "packets",
        C::LossRetransmit, "requests received again: the sender retransmitted (lost ack)")
        .wrap(32).dir(Receive).facts(MLX5_Q),
    hca("node_infiniband_rnr_nak_retry_packets_received_total", Counter, "packets",
        C::HostPcie, "receiver-not-ready NAKs received: the remote host had no receive buffer")
        .wrap(32).dir(Transmit).facts(MLX5_Q),
    hca("node_infiniband_out_of_buffer_drops_total", Counter, "packets", C::HostPcie,
        "packets dropped because no receive WQE was posted: the host (CPU, PCIe) fell behind")
        .wrap(32).dir(Receive).facts(MLX5_Q),
    hca("node_infiniband_np_ecn_marked_roce_packets_received_total", Counter, "packets",
        C::Congestion, "ECN-marked RoCE packets received: congestion on the path towards this port")
        .wrap(64).dir(NotificationPoint).own().facts(MLX5_CC),
    hca("node_infiniband_np_cnp_packets_sent_total", Counter, "packets", C::Congestion,
        "CNPs sent by this receiver to slow the senders down")
        .wrap(64).dir(NotificationPoint).own().facts(MLX5_CC),
    hca("node_infiniband_rp_cnp_packets_handled_total", Counter, "packets", C::Congestion,
        "CNPs handled by this sender: its transmit rate was throttled")
        .wrap(64).dir(ReactionPoint).own().facts(MLX5_CC),
    hca("node_infiniband_rp_cnp_ignored_packets_received_total", Counter, "packets",
        C::Congestion, "CNPs ignored by this sender (should stay zero with congestion control on)")
        .wrap(64).dir(ReactionPoint).facts(MLX5_CC),
    hca("node_infiniband_roce_adp_retransmits_total", Counter, "events", C::LossRetransmit,
        "adaptive retransmissions of RoCE traffic").wrap(32).dir(Transmit).facts(MLX5_Q),
    hca("node_infiniband_roce_adp_retransmits_timeout_total", Counter, "events",
        C::LossRetransmit, "adaptive retransmissions that hit their timeout")
        .wrap(32).dir(Transmit).facts(MLX5_Q),
    hca("node_infiniband_rx_icrc_encapsulated_errors_total", Counter, "packets",
        C::PhysicalErrors, "RoCE packets received with ICRC errors").wrap(32).dir(Receive)
        .facts(MLX5_Q),
    // infiniband_exporter switch ports (labels switch or guid, port).
    sw("infiniband_switch_port_transmit_data_bytes_total", "bytes", C::Throughput,
        "data bytes sent by the switch port").scale(4.0).wrap(64).dir(Transmit)
        .facts(DATA_SWITCH),
    sw("infiniband_switch_port_receive_data_bytes_total", "bytes", C::Throughput,
        "data bytes received by the switch port").scale(4.0).wrap(64).dir(Receive)
        .facts(DATA_SWITCH),
    sw("infiniband_switch_port_transmit_packets_total", "packets", C::Throughput,
        "packets sent by the switch port").wrap(64).dir(Transmit),
    sw("infiniband_switch_port_receive_packets_total", "packets", C::Throughput,
        "packets received by the switch port").wrap(64).dir(Receive),
    sw("infiniband_switch_port_symbol_error_total", "errors", C::PhysicalErrors,
        "minor bit errors on the switch port's lanes").sat(16).dir(Receive).facts(PMA),
    sw("infiniband_switch_port_receive_errors_total", "packets", C::PhysicalErrors,
        "packets with errors received by the switch port").sat(16).dir(Receive).facts(PMA),
    sw("infiniband_switch_port_receive_remote_physical_errors_total", "packets",
        C::PhysicalErrors, "packets received marked bad by an upstream hop")
        .sat(16).dir(Receive).facts(PMA),
    sw("infiniband_switch_port_local_link_integrity_errors_total", "events", C::PhysicalErrors,
        "times local physical errors exceeded the threshold").sat(4).facts(PMA),
    sw("infiniband_switch_port_excessive_buffer_overrun_errors_total", "events", C::Drops,
        "consecutive flow-control periods with receive buffer overruns")
        .sat(4).dir(Receive).facts(PMA),
    sw("infiniband_switch_port_transmit_discards_total", "packets", C::Drops,
        "packets the switch port discarded instead of sending (down, congested, timeout)")
        .sat(16).dir(Transmit).facts(PMA),
    sw("infiniband_switch_port_receive_switch_relay_errors_total", "packets", C::Drops,
        "packets the switch could not forward (routing)").sat(16).dir(Receive).facts(PMA),
    sw("infiniband_switch_port_transmit_wait_total", "ticks", C::Congestion,
        "ticks the switch port had data to send but no credits")
        .sat(32).dir(Transmit).own().facts(XMIT_WAIT),
    sw("infiniband_switch_port_link_downed_total", "events", C::LinkFlaps,
        "times the switch port's link went down").sat(8).facts(PMA),
    sw("infiniband_switch_port_link_error_recovery_total", "events", C::LinkFlaps,
        "times the switch port's link retrained after an error").sat(8).facts(PMA),
    // node_exporter host metrics (entity: the node).
    host(names::CPU_PRESSURE_WAITING, Domain::DataLoading, Counter, "seconds",
        C::CpuPressure, "time runnable tasks waited for a CPU (PSI some)"),
    host("node_cpu_seconds_total", Domain::DataLoading, Counter, "seconds", C::Utilization,
        "CPU time per cpu and mode (iowait, user, system, ...)"),
    host("node_load1", Domain::DataLoading, Gauge, "tasks", C::CpuPressure,
        "one-minute load average"),
    host("node_disk_read_time_seconds_total", Domain::Storage, Counter, "seconds", C::Latency,
        "time spent on reads of a local disk; divided by reads completed: mean read latency"),
    host("node_disk_reads_completed_total", Domain::Storage, Counter, "reads", C::Throughput,
        "reads completed on a local disk"),
    // NCCL Inspector (labels collective, gpu, comm_name, slurm_job_id, message_size, ...).
    nccl(names::COLLECTIVE_EXEC_TIME, "microseconds", C::Latency,
        "mean execution time of a collective over the dump interval")
        .facts("aggregated per communicator, collective, algorithm and message-size bucket; \
                gpu label is GPU<n>"),
    nccl("nccl_bus_bandwidth_gbs", "GB/s", C::Throughput,
        "collective bus bandwidth, comparable with the hardware peak")
        .facts("geometric mean over the dump interval; falls when any link on the \
                collective's ring or tree slows down"),
    nccl("nccl_p2p_exec_time_microseconds", "microseconds", C::Latency,
        "mean execution time of point-to-point send/recv"),
    nccl("nccl_p2p_bus_bandwidth_gbs", "GB/s", C::Throughput,
        "point-to-point bus bandwidth"),
    // Lockstep application and storage names (emit them, e.g. via OpenTelemetry).
    app(names::STEP_TIME, Domain::Training, Gauge, "seconds", C::StepTime, Job,
        "wall time of one training step on one rank (labels job, rank)"),
    app(names::DATALOADER_WAIT, Domain::DataLoading, Gauge, "seconds", C::Wait, Node,
        "time a rank waited for its next batch in the step (labels job, rank)"),
    app("checkpoint_write_duration_seconds", Domain::Storage, Gauge, "seconds", C::Latency, Job,
        "wall time to write one checkpoint (labels job, optional pool, rank)"),
    app(names::STORAGE_READ_LATENCY, Domain::Storage, Gauge, "seconds", C::Latency,
        StoragePool, "read latency quantile of a storage pool (labels pool, quantile)"),
    app("storage_write_latency_seconds", Domain::Storage, Gauge, "seconds", C::Latency,
        StoragePool, "write latency quantile of a storage pool (labels pool, quantile)"),
    app("storage_read_bytes_total", Domain::Storage, Counter, "bytes", C::Throughput,
        StoragePool, "bytes read from a storage pool (labels pool, optional job)").wrap(64),
    app("storage_write_bytes_total", Domain::Storage, Counter, "bytes", C::Throughput,
        StoragePool, "bytes written to a storage pool (labels pool, optional job)").wrap(64),
    app("storage_queue_depth", Domain::Storage, Gauge, "requests", C::QueueDepth, StoragePool,
        "outstanding requests at a storage pool (label pool)"),
];

/// The built-in families as [`MetricInfo`]s.
pub(crate) fn families() -> impl Iterator<Item = MetricInfo> {
    SPECS.iter().map(|s| MetricInfo {
        family: s.family.to_owned(),
        source: s.source.to_owned(),
        domain: s.domain,
        kind: s.kind,
        unit: s.unit.to_owned(),
        class: s.class,
        meaning: s.meaning.to_owned(),
        entity_kind: s.entity,
        scale: s.scale,
        counter_width: s.width,
        direction: s.direction,
        compare: s.compare,
        facts: s.facts.to_owned(),
    })
}
