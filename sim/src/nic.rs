//! node_exporter InfiniBand series of every host NIC port (compute nodes and storage servers),
//! including the mlx5 hardware counters; the congestion counters (ECN, CNP) only on RoCE ports.
//! Error counters saturate at their hardware width (16 or 8 bits) as the real ones do.

use super::SimError;
use super::cluster::Fabric;
use super::rng::Rng;
use super::sink::{Label, SeriesId, Sink};
use super::world::{NicTraffic, Scraper, World};

const COUNTERS: [&str; 18] = [
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
    "node_infiniband_out_of_sequence_packets_received_total",
    "node_infiniband_packet_sequence_errors_total",
    "node_infiniband_local_ack_timeout_errors_total",
    "node_infiniband_duplicate_requests_packets_total",
    "node_infiniband_out_of_buffer_drops_total",
    "node_infiniband_np_cnp_packets_sent_total",
    "node_infiniband_rp_cnp_packets_handled_total",
    "node_infiniband_np_ecn_marked_roce_packets_received_total",
];
const GAUGES: [&str; 2] = ["node_infiniband_state_id", "node_infiniband_rate_bytes_per_second"];
const IB_COUNTERS: usize = 15;
const TX: usize = 0;
const RX: usize = 1;
const TX_PKT: usize = 2;
const RX_PKT: usize = 3;
const SYMBOL: usize = 4;
const RCV_ERR: usize = 5;
const LINK_DOWNED: usize = 6;
const RECOVERY: usize = 7;
const DISCARDS: usize = 8;
const XMIT_WAIT: usize = 9;
const OUT_OF_SEQ: usize = 10;
const SEQ_ERR: usize = 11;
const ACK_TIMEOUT: usize = 12;
const DUP_REQ: usize = 13;
const OOB_DROPS: usize = 14;
const CNP_SENT: usize = 15;
const CNP_HANDLED: usize = 16;
const ECN_MARKED: usize = 17;
/// NDR / 400GbE line rate.
const RATE_BYTES: f64 = 50e9;
const MTU: f64 = 4096.0;
/// Marked packets per second of all-reduce transfer on a healthy RoCE port (incast bursts).
const ECN_BASE: f64 = 2_500.0;

/// Saturation limit of counter `c` (IB PortCounters widths; PortXmitWait is the 32-bit
/// PortCounters field, which sysfs and node_exporter report as is).
fn limit(c: usize) -> f64 {
    match c {
        SYMBOL | RCV_ERR | DISCARDS => 65_535.0,
        LINK_DOWNED | RECOVERY => 255.0,
        XMIT_WAIT => 4_294_967_295.0,
        _ => f64::MAX,
    }
}

struct Port {
    ids: Vec<SeriesId>,
    gauges: [SeriesId; 2],
    counters: [f64; 18],
    factor: f64,
}

struct HostPorts {
    host: usize,
    /// `Some(node)` for a compute node, `None` for a storage server.
    node: Option<usize>,
    scraper: Scraper,
    ports: Vec<Port>,
}

/// Emits the NIC series of every compute node and storage server.
pub(crate) struct NicEmitter {
    hosts: Vec<HostPorts>,
    server_nics: f64,
    rng: Rng,
}

impl NicEmitter {
    /// Registers the series of every NIC port.
    pub(crate) fn new(world: &World<'_>, sink: &mut Sink, interval: i64, start: i64, seed: u64) -> Self {
        let c = world.cluster;
        let n_counters = if c.fabric == Fabric::Roce { COUNTERS.len() } else { IB_COUNTERS };
        let mut rng = Rng::stream(seed, 0x41C);
        let mut hosts = Vec::new();
        let nodes = c.nodes.iter().enumerate().map(|(i, n)| (i, Some(i), &n.name, &n.nics));
        let servers = c.servers.iter().enumerate().map(|(i, s)| (c.server_host(i), None, &s.name, &s.nics));
        for (host, node, name, nics) in nodes.chain(servers) {
            let ports = nics
                .iter()
                .map(|nic| {
                    let labels = [(Label::Device, nic.device.as_str()), (Label::Port, "1")];
                    let ids = COUNTERS[..n_counters].iter().map(|m| sink.register(name, m, &labels)).collect();
                    let gauges = GAUGES.map(|m| sink.register(name, m, &labels));
                    let mut counters = [0.0; 18];
                    counters[TX] = rng.range(1e12, 2e14).round();
                    counters[RX] = (counters[TX] * rng.range(0.95, 1.05)).round();
                    counters[TX_PKT] = (counters[TX] / MTU).round();
                    counters[RX_PKT] = (counters[RX] / MTU).round();
                    // Well below the 32-bit ceiling: a healthy port saturates after hours,
                    // a congested one within minutes (as real PortXmitWait counters do).
                    counters[XMIT_WAIT] = rng.range(1e6, 1e9).round();
                    counters[LINK_DOWNED] = rng.below(2) as f64;
                    if rng.chance(0.1) {
                        counters[SYMBOL] = rng.below(20) as f64;
                    }
                    Port { ids, gauges, counters, factor: 1.0 + 0.03 * rng.normal() }
                })
                .collect();
            hosts.push(HostPorts {
                host,
                node,
                scraper: Scraper::new(interval, start, Rng::stream(seed, 0x41D_0000 + host as u64)),
                ports,
            });
        }
        let server_nics = c.servers.iter().map(|s| s.nics.len()).sum::<usize>().max(1) as f64;
        Self { hosts, server_nics, rng: Rng::stream(seed, 0x41E) }
    }

    /// Scrapes every host once for the tick starting at `tick_start`.
    pub(crate) fn tick(&mut self, world: &World<'_>, tick_start: i64, sink: &mut Sink) -> Result<(), SimError> {
        for hp in &mut self.hosts {
            let (a, b) = hp.scraper.next(tick_start);
            let local = world.clocks[hp.host].local(b);
            for (k, port) in hp.ports.iter_mut().enumerate() {
                let mut inc = [0.0; 18];
                match hp.node {
                    Some(n) => node_increments(world, n, k, a, b, &mut inc, &mut self.rng),
                    None => server_increments(world, self.server_nics, a, b, &mut inc, &mut self.rng),
                }
                let f = port.factor * self.rng.lognormal(0.01);
                inc[TX] *= f;
                inc[RX] *= f;
                inc[TX_PKT] = inc[TX] / MTU * 1.015;
                inc[RX_PKT] = inc[RX] / MTU * 1.015;
                inc[XMIT_WAIT] += inc[TX] * 2e-5 * self.rng.lognormal(0.3);
                for (c, (value, id)) in port.counters.iter_mut().zip(&port.ids).enumerate() {
                    *value = (*value + inc[c].round()).min(limit(c));
                    sink.push(*id, local, *value)?;
                }
                sink.push(port.gauges[0], local, 4.0)?;
                sink.push(port.gauges[1], local, RATE_BYTES)?;
            }
        }
        Ok(())
    }
}

/// Counter increments of NIC `k` of compute node `n` over `[a, b)`.
fn node_increments(world: &World<'_>, n: usize, k: usize, a: i64, b: i64, inc: &mut [f64; 18], rng: &mut Rng) {
    let plan = world.plan;
    let dt = (b - a) as f64 / 1e9;
    let t = world.nic_traffic(n, a, b);
    inc[TX] = t.coll + t.writes;
    inc[RX] = t.coll + t.reads;
    let active = (inc[RX] / (dt * 4e9)).min(1.0);
    let is_fault = plan.nic == Some((n, k));
    let is_sender = plan.sender == Some((n, k));
    // Bad cable: errors at the receiving NIC, retransmission timeouts at its ring predecessor.
    let err_rate = if is_fault { plan.symbol_error_rate(b) } else { 0.0 };
    let sender_rate = if is_sender && plan.nic.is_some() && world.cluster.fabric == Fabric::Infiniband {
        plan.symbol_error_rate(b)
    } else {
        0.0
    };
    inc[SYMBOL] = rng.poisson(err_rate * dt) as f64;
    if plan.red_nic == (n, k) {
        inc[SYMBOL] += rng.poisson(dt / 60.0) as f64;
    }
    inc[RCV_ERR] = rng.poisson(err_rate * 0.4 * active * dt) as f64;
    if is_fault {
        inc[RECOVERY] = plan.recoveries_in(a, b) as f64;
    }
    inc[OUT_OF_SEQ] = rng.poisson((err_rate * 0.3 * active + 0.002) * dt) as f64;
    inc[SEQ_ERR] = rng.poisson(err_rate * 0.25 * active * dt) as f64;
    inc[DUP_REQ] = rng.poisson(err_rate * 0.1 * active * dt) as f64;
    inc[ACK_TIMEOUT] = rng.poisson(sender_rate * 0.05 * active * dt) as f64;
    inc[TX] += t.coll * 0.03 * (sender_rate / 60.0);
    inc[XMIT_WAIT] = inc[TX] * 5e-3 * (sender_rate / 60.0);
    inc[DISCARDS] = rng.poisson(1e-4 * dt) as f64;
    if world.cluster.fabric == Fabric::Roce {
        roce_increments(world, n, k, b, &t, inc, rng);
    }
}

/// Congestion counters of a RoCE NIC: a slow receiver drops for lack of buffers, the switch
/// marks ECN on packets queued towards it, the receiver answers with CNPs, and the senders
/// throttle (DCQCN) and sit in PFC pause.
fn roce_increments(world: &World<'_>, n: usize, k: usize, b: i64, t: &NicTraffic, inc: &mut [f64; 18], rng: &mut Rng) {
    let plan = world.plan;
    let sev = plan.roce_severity(b);
    let is_fault = plan.nic == Some((n, k));
    let is_sender = plan.sender == Some((n, k));
    let same_leaf = plan.nic.is_some_and(|(fnode, _)| world.cluster.nodes[fnode].leaf == world.cluster.nodes[n].leaf);
    let mut ecn = ECN_BASE * t.xfer_s;
    let mut handled = ECN_BASE * 0.35 * t.xfer_s;
    if is_fault {
        ecn += sev * 4e5 * t.xfer_s;
        let drops = rng.poisson(sev * 4_000.0 * t.xfer_s) as f64;
        inc[OOB_DROPS] = drops;
        inc[OUT_OF_SEQ] += (drops * 0.2).round();
        inc[SEQ_ERR] += (drops * 0.5).round();
    }
    if is_sender {
        handled += sev * 4e5 * 0.35 * 0.9 * t.xfer_s;
        inc[XMIT_WAIT] += inc[TX] * 3e-2 * sev;
        inc[ACK_TIMEOUT] += rng.poisson(sev * 3.0 * t.xfer_s) as f64;
    } else if same_leaf {
        handled += sev * 3_000.0 * t.xfer_s;
        inc[XMIT_WAIT] += inc[TX] * 2e-3 * sev;
    }
    inc[ECN_MARKED] = rng.poisson(ecn) as f64;
    inc[CNP_SENT] = rng.poisson(ecn * 0.35) as f64;
    inc[CNP_HANDLED] = rng.poisson(handled) as f64;
}

/// Counter increments of one storage server NIC over `[a, b)`.
fn server_increments(world: &World<'_>, server_nics: f64, a: i64, b: i64, inc: &mut [f64; 18], rng: &mut Rng) {
    let plan = world.plan;
    let dt = (b - a) as f64 / 1e9;
    let (reads, writes) = world.pool_traffic(a, b);
    inc[TX] = reads / server_nics;
    inc[RX] = writes / server_nics;
    let active = (inc[TX] / (dt * 2e9)).min(1.0);
    // A bad link on the storage path: read replies get lost, the servers' QPs time out.
    let path_rate = if plan.nic.is_none() { plan.symbol_error_rate(b) } else { 0.0 };
    inc[ACK_TIMEOUT] = rng.poisson((path_rate * 0.3 * active / server_nics.sqrt() + 0.001) * dt) as f64;
    inc[XMIT_WAIT] = inc[TX] * 2e-3 * (path_rate / 60.0);
    inc[OUT_OF_SEQ] = rng.poisson(0.002 * dt) as f64;
}
