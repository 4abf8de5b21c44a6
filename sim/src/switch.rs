//! infiniband_exporter series of every cabled switch port (labels `switch`, `port`, `guid`;
//! `host` = the switch, whose own clock stamps the samples). Data counters are in raw PortXmitData
//! units (octets / 4); the storage leaf only has 32-bit data counters, which wrap every few
//! seconds under storage load. Error counters saturate at their hardware width.

use super::SimError;
use super::cluster::Peer;
use super::rng::Rng;
use super::sink::{Label, SeriesId, Sink};
use super::world::{Scraper, World};

const METRICS: [&str; 8] = [
    "infiniband_switch_port_symbol_error_total",
    "infiniband_switch_port_receive_errors_total",
    "infiniband_switch_port_transmit_discards_total",
    "infiniband_switch_port_transmit_wait_total",
    "infiniband_switch_port_link_downed_total",
    "infiniband_switch_port_link_error_recovery_total",
    "infiniband_switch_port_transmit_data_bytes_total",
    "infiniband_switch_port_receive_data_bytes_total",
];
const SYMBOL: usize = 0;
const RCV_ERR: usize = 1;
const DISCARDS: usize = 2;
const XMIT_WAIT: usize = 3;
const RECOVERY: usize = 5;
const TX: usize = 6;
const RX: usize = 7;
const WRAP_32: f64 = 4_294_967_296.0;

struct PortState {
    ids: [SeriesId; 8],
    counters: [f64; 8],
}

struct SwitchState {
    host: usize,
    scraper: Scraper,
    ports: Vec<PortState>,
}

/// Emits the switch port series (InfiniBand fabrics only).
pub(crate) struct SwitchEmitter {
    switches: Vec<SwitchState>,
    rng: Rng,
}

impl SwitchEmitter {
    /// Registers the series of every cabled port of every switch.
    pub(crate) fn new(world: &World<'_>, sink: &mut Sink, interval: i64, start: i64, seed: u64) -> Self {
        let c = world.cluster;
        let mut rng = Rng::stream(seed, 0x5A1);
        let mut switches = Vec::new();
        if c.has_switch_metrics() {
            for (s, sw) in c.switches.iter().enumerate() {
                let host = c.switch_host(s);
                let ports = sw
                    .ports
                    .iter()
                    .map(|p| {
                        let labels = [
                            (Label::Switch, sw.name.as_str()),
                            (Label::Port, p.label.as_str()),
                            (Label::Guid, sw.guid.as_str()),
                        ];
                        let ids = METRICS.map(|m| sink.register(&sw.name, m, &labels));
                        let mut counters = [0.0; 8];
                        counters[TX] = rng.range(1e12, 5e14).round();
                        counters[RX] = rng.range(1e12, 5e14).round();
                        counters[XMIT_WAIT] = rng.range(1e6, 1e9).round();
                        counters[4] = rng.below(2) as f64;
                        if rng.chance(0.1) {
                            counters[SYMBOL] = rng.below(30) as f64;
                        }
                        PortState { ids, counters }
                    })
                    .collect();
                let scraper = Scraper::new(interval, start, Rng::stream(seed, 0x5A2_0000 + s as u64));
                switches.push(SwitchState { host, scraper, ports });
            }
        }
        Self { switches, rng: Rng::stream(seed, 0x5A3) }
    }

    /// Scrapes every switch once for the tick starting at `tick_start`.
    pub(crate) fn tick(&mut self, world: &World<'_>, tick_start: i64, sink: &mut Sink) -> Result<(), SimError> {
        let c = world.cluster;
        let plan = world.plan;
        let server_nics = c.servers.iter().map(|s| s.nics.len()).sum::<usize>().max(1) as f64;
        let mut leaf_up: Vec<Option<(f64, f64)>> = vec![None; c.switches.len()];
        for (s, st) in self.switches.iter_mut().enumerate() {
            let (a, b) = st.scraper.next(tick_start);
            let dt = (b - a) as f64 / 1e9;
            let local = world.clocks[st.host].local(b);
            let sw = &c.switches[s];
            leaf_up.iter_mut().for_each(|x| *x = None);
            let mut pool: Option<(f64, f64)> = None;
            let rate = plan.symbol_error_rate(b);
            let sev = rate / 60.0;
            for (p, (port, ps)) in sw.ports.iter().zip(st.ports.iter_mut()).enumerate() {
                let mut inc = [0.0; 8];
                let uplink = matches!(port.peer, Peer::Switch { .. });
                let (tx, rx) = match port.peer {
                    Peer::Node { node, .. } => {
                        let t = world.nic_traffic(node, a, b);
                        (t.coll + t.reads, t.coll + t.writes)
                    }
                    Peer::Server { .. } => {
                        let (reads, writes) = *pool.get_or_insert_with(|| world.pool_traffic(a, b));
                        (writes / server_nics, reads / server_nics)
                    }
                    Peer::Switch { switch: peer, port: pp } => {
                        let (leaf, weight, up_is_tx) = if sw.spine {
                            (peer, c.switches[peer].ports[pp].weight, false)
                        } else {
                            (s, port.weight, true)
                        };
                        let (up, down) = *leaf_up[leaf].get_or_insert_with(|| world.leaf_up(leaf, a, b));
                        if up_is_tx { (up * weight, down * weight) } else { (down * weight, up * weight) }
                    }
                };
                let noise = self.rng.lognormal(0.01);
                inc[TX] = tx * noise;
                inc[RX] = rx * noise;
                let active = (rx / (dt * 2e9)).min(1.0);
                inc[XMIT_WAIT] = inc[TX] * if uplink { 6e-5 } else { 1e-5 } * self.rng.lognormal(0.3);
                inc[DISCARDS] = self.rng.poisson(if uplink { 1e-4 * dt } else { 0.0 }) as f64;
                if plan.port == Some((s, p)) {
                    if plan.nic.is_some() {
                        // Switch end of the bad NIC cable: its receive side is mostly fine.
                        inc[SYMBOL] += self.rng.poisson(rate * 0.25 * dt) as f64;
                        inc[RCV_ERR] += self.rng.poisson(rate * 0.1 * active * dt) as f64;
                        inc[RECOVERY] += plan.recoveries_in(a, b) as f64;
                        inc[XMIT_WAIT] += inc[TX] * 4e-3 * sev;
                        inc[DISCARDS] += self.rng.poisson(sev * 2.0 * dt) as f64;
                    } else {
                        // The bad receiver on the storage path.
                        inc[SYMBOL] += self.rng.poisson(rate * dt) as f64;
                        inc[RCV_ERR] += self.rng.poisson(rate * 0.4 * active * dt) as f64;
                    }
                }
                if plan.port_peer == Some((s, p)) {
                    inc[SYMBOL] += self.rng.poisson(rate * 0.08 * dt) as f64;
                    inc[XMIT_WAIT] += inc[TX] * 4e-3 * sev;
                    inc[DISCARDS] += self.rng.poisson(sev * dt) as f64;
                }
                if plan.red_port == (s, p) {
                    inc[SYMBOL] += self.rng.poisson(dt / 25.0) as f64;
                }
                for (i, id) in ps.ids.iter().enumerate() {
                    let limit = match i {
                        SYMBOL | RCV_ERR | DISCARDS => 65_535.0,
                        4 | RECOVERY => 255.0,
                        XMIT_WAIT => 4_294_967_295.0,
                        _ => f64::MAX,
                    };
                    ps.counters[i] = (ps.counters[i] + inc[i].round()).min(limit);
                    let v = if i == TX || i == RX {
                        let words = (ps.counters[i] / 4.0).floor();
                        if sw.counters_32bit { words % WRAP_32 } else { words }
                    } else {
                        ps.counters[i]
                    };
                    sink.push(*id, local, v)?;
                }
            }
        }
        Ok(())
    }
}
