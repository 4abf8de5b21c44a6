//! The TOML format that extends or overrides the built-in catalog.
//!
//! ```toml
//! [[metric]]
//! family = "infiniband_switch_port_transmit_data_bytes_total"
//! domain = "network"              # compute | network | storage | data_loading | training | collective
//! kind = "counter"                # counter | gauge
//! unit = "bytes"                  # unit of raw value × scale
//! class = "throughput"            # see MetricClass
//! entity = "switch_port"          # gpu | nic_port | switch_port | node | storage_pool | job
//! meaning = "data bytes sent by the switch port"
//! scale = 1.0                     # optional, default 1
//! counter_bits = 64               # optional, counters only, 1..=64
//! overflow = "wrap"               # optional with counter_bits: wrap (default) | saturate
//! direction = "transmit"          # optional: transmit | receive | notification_point | reaction_point
//! compare = "absolute"            # optional: absolute (default) | own_baseline
//! source = "site"                 # optional, default "custom"
//! facts = "..."                   # optional
//! ```
//!
//! Unknown keys are errors, so a typo cannot silently change a meaning.

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::metrics::{
    Comparison, CounterWidth, Direction, Domain, EntityKind, MetricClass, MetricInfo, MetricKind, Overflow,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    #[serde(default)]
    metric: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    family: String,
    domain: Domain,
    kind: MetricKind,
    unit: String,
    class: MetricClass,
    entity: EntityKind,
    meaning: String,
    #[serde(default)]
    scale: Option<f64>,
    #[serde(default)]
    counter_bits: Option<u8>,
    #[serde(default)]
    overflow: Option<Overflow>,
    #[serde(default)]
    direction: Option<Direction>,
    #[serde(default)]
    compare: Option<Comparison>,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    facts: Option<String>,
}

/// Parses and checks a catalog extension; all entries or an error.
pub(crate) fn parse(text: &str) -> Result<Vec<MetricInfo>> {
    let doc: Document = toml::from_str(text)
        .map_err(|e| Error::MetricCatalogInvalid { reason: e.to_string().trim_end().to_owned() })?;
    doc.metric.into_iter().map(check).collect()
}

fn check(e: Entry) -> Result<MetricInfo> {
    let invalid = |reason: String| Error::MetricCatalogInvalid { reason };
    if !is_metric_name(&e.family) {
        return Err(invalid(format!("family {:?} is not a valid metric name", e.family)));
    }
    let scale = e.scale.unwrap_or(1.0);
    if !scale.is_finite() || scale <= 0.0 {
        return Err(invalid(format!("family {}: scale {scale} must be finite and > 0", e.family)));
    }
    let counter_width = match (e.counter_bits, e.overflow) {
        (None, None) => None,
        (None, Some(_)) => {
            return Err(invalid(format!("family {}: overflow needs counter_bits", e.family)));
        }
        (Some(bits), overflow) => {
            if !(1..=64).contains(&bits) {
                return Err(invalid(format!("family {}: counter_bits {bits} is outside 1..=64", e.family)));
            }
            if e.kind != MetricKind::Counter {
                return Err(invalid(format!("family {}: counter_bits on a gauge", e.family)));
            }
            Some(CounterWidth { bits, overflow: overflow.unwrap_or(Overflow::Wrap) })
        }
    };
    Ok(MetricInfo {
        family: e.family,
        source: e.source.unwrap_or_else(|| "custom".to_owned()),
        domain: e.domain,
        kind: e.kind,
        unit: e.unit,
        class: e.class,
        meaning: e.meaning,
        entity_kind: e.entity,
        scale,
        counter_width,
        direction: e.direction,
        compare: e.compare.unwrap_or(Comparison::Absolute),
        facts: e.facts.unwrap_or_default(),
    })
}

/// Whether `name` matches the Prometheus metric name syntax `[a-zA-Z_:][a-zA-Z0-9_:]*`.
pub(crate) fn is_metric_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}
