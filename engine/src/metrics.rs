//! The metric catalog: what every known metric family means.
//!
//! Each family (a metric name as exporters emit it, e.g. `node_infiniband_symbol_error_total`)
//! is described by a [`MetricInfo`]: its [`Domain`], [`MetricKind`], unit, operational
//! [`MetricClass`], the [`EntityKind`] it describes and fabric facts such as the scale that
//! turns raw values into the unit (`4.0` for InfiniBand 4-octet data words), the hardware
//! counter width and overflow behaviour ([`CounterWidth`]), the traffic [`Direction`] and
//! whether values are only comparable with the same port's history ([`Comparison`]).
//!
//! The catalog is built in ([`MetricCatalog::builtin`]) and extendable by a TOML file
//! ([`MetricCatalog::extend_from_toml`]). Raw metric names and values are never rewritten:
//! the catalog only says how to read them. See `docs/metrics.md` for the full list.

mod builtin;
mod config;
pub mod counter;
pub mod entity;
pub mod names;
pub mod throttle;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::SeriesKey;

pub use counter::{Baseline, CounterStep, CounterWidth, Overflow, counter_increase, counter_rates_into, counter_step};
pub use entity::Entity;
pub use throttle::ThrottleReasons;

/// Declares a string-like enum with serde `snake_case` names, `as_str`, `ALL` and `Display`.
macro_rules! name_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The name used in SQL, TOML and docs.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// Parses the name used in SQL, TOML and docs.
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

name_enum! {
    /// The part of a training system a metric belongs to.
    Domain {
        /// GPUs (and the host's own compute when it is the GPU's feeder).
        Compute => "compute",
        /// Host NICs, switches and links.
        Network => "network",
        /// Storage pools, their servers, local disks and checkpoint writes.
        Storage => "storage",
        /// Data loaders and the host CPU that feeds the GPUs.
        DataLoading => "data_loading",
        /// The training loop itself (step time).
        Training => "training",
        /// Collective communication (NCCL).
        Collective => "collective",
    }
}

name_enum! {
    /// Whether values accumulate or are point-in-time readings.
    MetricKind {
        /// Monotonic until reset, wrap or saturation; read as increases and rates.
        Counter => "counter",
        /// A reading at the sample time.
        Gauge => "gauge",
    }
}

name_enum! {
    /// The kind of thing a series describes; see [`Entity`] for the naming.
    EntityKind {
        /// A GPU: `node-03/gpu5`.
        Gpu => "gpu",
        /// A host NIC port: `node-03/mlx5_2:1`.
        NicPort => "nic_port",
        /// A switch port: `leaf-2:17`.
        SwitchPort => "switch_port",
        /// A host (compute node or storage server): `node-03`.
        Node => "node",
        /// A storage pool: `lustre-a`.
        StoragePool => "storage_pool",
        /// A training job: `llm-70b`.
        Job => "job",
    }
}

name_enum! {
    /// The operational class of a metric: what question it answers.
    MetricClass {
        /// Port or link state and negotiated rate.
        LinkState => "link_state",
        /// Links going down or retraining.
        LinkFlaps => "link_flaps",
        /// Bytes, packets or operations moved.
        Throughput => "throughput",
        /// Bit-level errors: symbol errors, bad packets, CRC.
        PhysicalErrors => "physical_errors",
        /// Packets discarded by a port.
        Drops => "drops",
        /// Lost packets and the retransmits, timeouts and duplicates that follow.
        LossRetransmit => "loss_retransmit",
        /// Back-pressure: waiting for credits, ECN marks, congestion notifications.
        Congestion => "congestion",
        /// How long an operation took.
        Latency => "latency",
        /// The host side of the NIC (PCIe, receive buffers) could not keep up.
        HostPcie => "host_pcie",
        /// Busy fraction of a device.
        Utilization => "utilization",
        /// Clock frequency.
        Clock => "clock",
        /// Temperature.
        Temperature => "temperature",
        /// Power draw.
        Power => "power",
        /// Why clocks are being held down.
        Throttle => "throttle",
        /// Device-level errors (GPU XID).
        DeviceErrors => "device_errors",
        /// Runnable work waiting for CPU.
        CpuPressure => "cpu_pressure",
        /// Duration of a training step.
        StepTime => "step_time",
        /// Time spent waiting for input.
        Wait => "wait",
        /// Outstanding requests.
        QueueDepth => "queue_depth",
    }
}

name_enum! {
    /// Which way the counted traffic flows, seen from the entity.
    Direction {
        /// Leaving the port.
        Transmit => "transmit",
        /// Arriving at the port.
        Receive => "receive",
        /// RoCE congestion control, receiver side (`np_*`): this port received ECN-marked
        /// packets and sent CNPs; the congestion is on the path towards it.
        NotificationPoint => "notification_point",
        /// RoCE congestion control, sender side (`rp_*`): this port was told to slow down;
        /// its own transmit rate is being throttled.
        ReactionPoint => "reaction_point",
    }
}

name_enum! {
    /// How values of a family can be compared.
    Comparison {
        /// Values mean the same on every entity; absolute thresholds work.
        Absolute => "absolute",
        /// Only comparable with the same entity's own history (e.g. PortXmitWait ticks, whose
        /// length is hardware-specific); use [`Baseline`].
        OwnBaseline => "own_baseline",
    }
}

/// Everything the catalog knows about one metric family.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricInfo {
    /// The metric name as exported.
    pub family: String,
    /// Where it comes from (`dcgm-exporter`, `node_exporter`, `infiniband_exporter`,
    /// `nccl-inspector`, `lockstep`, or what a TOML extension says).
    pub source: String,
    /// The domain.
    pub domain: Domain,
    /// Counter or gauge.
    pub kind: MetricKind,
    /// Unit of `raw value × scale` (for counters: of the increase).
    pub unit: String,
    /// The operational class.
    pub class: MetricClass,
    /// The normalised meaning, one sentence.
    pub meaning: String,
    /// What kind of entity a series of this family describes.
    pub entity_kind: EntityKind,
    /// Multiply raw values (or counter increases) by this to get `unit`.
    pub scale: f64,
    /// Hardware width and overflow rule of the raw counter, when known.
    pub counter_width: Option<CounterWidth>,
    /// Traffic direction, when meaningful.
    pub direction: Option<Direction>,
    /// Absolute or own-baseline comparison.
    pub compare: Comparison,
    /// Fabric- or exporter-specific facts worth knowing when reading the values.
    pub facts: String,
}

impl MetricInfo {
    /// Width of the raw counter in bits, when known.
    pub fn counter_bits(&self) -> Option<u8> {
        self.counter_width.map(|w| w.bits)
    }

    /// The normalised increase between two raw counter readings (wrap, reset and saturation
    /// handled by [`counter_step`], then scaled). Gauges return `cur - prev` scaled.
    pub fn increase(&self, prev: f64, cur: f64) -> f64 {
        match self.kind {
            MetricKind::Counter => counter_increase(prev, cur, self.counter_width) * self.scale,
            MetricKind::Gauge => (cur - prev) * self.scale,
        }
    }
}

/// Which part of a family a series is: the family itself or a histogram/summary companion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SeriesPart {
    /// The family name itself.
    Value,
    /// `<family>_bucket` (cumulative histogram bucket, a counter of observations).
    Bucket,
    /// `<family>_sum` (a counter in the family's unit).
    Sum,
    /// `<family>_count` (a counter of observations).
    Count,
}

/// A series matched to its family.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Classified<'a> {
    /// The family's description.
    pub info: &'a MetricInfo,
    /// Which part of the family the series is.
    pub part: SeriesPart,
}

impl Classified<'_> {
    /// The kind of this series: the family's kind, or counter for `_bucket`/`_sum`/`_count`.
    pub fn kind(&self) -> MetricKind {
        match self.part {
            SeriesPart::Value => self.info.kind,
            SeriesPart::Bucket | SeriesPart::Sum | SeriesPart::Count => MetricKind::Counter,
        }
    }

    /// The unit of this series (`observations` for `_bucket` and `_count`).
    pub fn unit(&self) -> &str {
        match self.part {
            SeriesPart::Value | SeriesPart::Sum => &self.info.unit,
            SeriesPart::Bucket | SeriesPart::Count => "observations",
        }
    }
}

/// File name of a catalog extension (TOML, see `docs/metrics.md`) in a bundle and in a store
/// directory.
pub const CATALOG_FILE: &str = "metrics.toml";

/// The catalog of known metric families, keyed by family name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricCatalog {
    families: BTreeMap<String, MetricInfo>,
    /// Switch GUID → switch name (from the topology), for naming switch-port series that
    /// carry `guid` but no `switch` label.
    switch_guids: std::collections::HashMap<String, String>,
}

impl MetricCatalog {
    /// An empty catalog.
    pub fn empty() -> Self {
        MetricCatalog::default()
    }

    /// The built-in catalog: dcgm-exporter, node_exporter (InfiniBand, RoCE/mlx5 and host),
    /// infiniband_exporter switch ports, NCCL Inspector and Lockstep's own names.
    pub fn builtin() -> Self {
        let mut catalog = MetricCatalog::empty();
        for info in builtin::families() {
            catalog.insert(info);
        }
        catalog
    }

    /// Adds or replaces the families described by a TOML document (see `docs/metrics.md`).
    /// Returns how many families were added or replaced. Nothing is changed on error.
    pub fn extend_from_toml(&mut self, text: &str) -> crate::Result<usize> {
        let infos = config::parse(text)?;
        let count = infos.len();
        for info in infos {
            self.insert(info);
        }
        Ok(count)
    }

    /// Adds a family, returning the description it replaced.
    pub fn insert(&mut self, info: MetricInfo) -> Option<MetricInfo> {
        self.families.insert(info.family.clone(), info)
    }

    /// The description of a family by exact name.
    pub fn get(&self, family: &str) -> Option<&MetricInfo> {
        self.families.get(family)
    }

    /// Matches a metric name to its family: the exact name first, then `<family>_bucket`,
    /// `_sum` and `_count` of a known family.
    pub fn classify_metric(&self, metric: &str) -> Option<Classified<'_>> {
        if let Some(info) = self.families.get(metric) {
            return Some(Classified { info, part: SeriesPart::Value });
        }
        const SUFFIXES: [(&str, SeriesPart); 3] =
            [("_bucket", SeriesPart::Bucket), ("_sum", SeriesPart::Sum), ("_count", SeriesPart::Count)];
        SUFFIXES.iter().find_map(|(suffix, part)| {
            let base = metric.strip_suffix(suffix)?;
            self.families.get(base).map(|info| Classified { info, part: *part })
        })
    }

    /// Classifies a series by its metric name (see [`MetricCatalog::classify_metric`]).
    pub fn classify(&self, key: &SeriesKey) -> Option<Classified<'_>> {
        self.classify_metric(&key.metric)
    }

    /// The entity a series describes (see [`entity::resolve`]); `None` only when the series
    /// has no `host` label.
    pub fn entity(&self, key: &SeriesKey) -> Option<Entity> {
        let guids = (!self.switch_guids.is_empty()).then_some(&self.switch_guids);
        entity::resolve(key, self.classify(key).map(|c| c.info.entity_kind), guids)
    }

    /// Names switches by GUID in [`MetricCatalog::entity`] (see
    /// [`crate::topology::Topology::switch_guids`]).
    pub fn set_switch_guids(&mut self, switch_guids: std::collections::HashMap<String, String>) {
        self.switch_guids = switch_guids;
    }

    /// Like [`MetricCatalog::entity`], naming switches from a GUID → switch-name map when a
    /// switch-port series carries `guid` but no `switch` label (infiniband_exporter).
    pub fn entity_with_guids(
        &self,
        key: &SeriesKey,
        switch_guids: &std::collections::HashMap<String, String>,
    ) -> Option<Entity> {
        entity::resolve(key, self.classify(key).map(|c| c.info.entity_kind), Some(switch_guids))
    }

    /// All families in name order.
    pub fn iter(&self) -> impl Iterator<Item = &MetricInfo> {
        self.families.values()
    }

    /// Number of families.
    pub fn len(&self) -> usize {
        self.families.len()
    }

    /// Whether the catalog has no families.
    pub fn is_empty(&self) -> bool {
        self.families.is_empty()
    }
}

#[cfg(test)]
mod tests;
