//! The counter family, one aggregate type with two switches: what it returns
//! (`CounterOutput`: the increase or the per-second rate) and whose rules turn consecutive
//! samples into steps (plain resets and an optional wrap width, or the metric catalog's).
//!
//! - `increase(time, value [, wrap_bits])`: how much a counter grew between the first and the
//!   last sample of the group (or window frame), across counter resets and, with `wrap_bits`
//!   = 16, 32 or 64, across wrap-around of narrow hardware counters. No extrapolation to bucket
//!   edges. Fewer than two samples give NULL.
//! - `rate(time, value [, wrap_bits])`: `increase` divided by the seconds from the first to
//!   the last sample; all samples at one instant give NULL.
//! - `normalized_increase(time, value, metric)` / `normalized_rate(time, value, metric)`: the
//!   same following the metric catalog's rules for the group's metric: its counter width
//!   (16/32/64-bit wrap, or saturation of the IB PortCounters fields), the 32-bit wrap of a
//!   64-bit data counter served from the 32-bit PortCounters, and its unit scale (×4 for the
//!   infiniband_exporter's octets/4 data counters). Families the catalog does not know as
//!   counters get the plain reset rule with scale 1. A group must hold one metric (group by
//!   `series_id`, or filter one metric); two metrics are a planning error naming both. A
//!   saturated counter that stayed at its maximum gives NULL (the growth is unknown).
//!
//! All of them order the samples by `time` inside the aggregate (input order never matters),
//! never return a negative number, ignore NULL times and NULL/NaN/±inf values, and work as
//! window functions, including sliding frames. Cost: O(n) when samples arrive in time order,
//! O(n log n) otherwise; O(n) memory per group. The step rules are in `functions/counter.rs`.

use std::sync::Arc;

use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::Result;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, Signature, Volatility};
use lockstep_engine::metrics::MetricCatalog;

use super::counter;
pub(crate) use super::counter::CounterOutput;

/// One of `increase`, `rate`, `normalized_increase`, `normalized_rate`.
#[derive(Debug)]
pub struct CounterAggregate {
    name: &'static str,
    output: CounterOutput,
    /// `Some` for the normalised variants: the catalog whose rules they follow.
    catalog: Option<Arc<MetricCatalog>>,
    signature: Signature,
}

impl CounterAggregate {
    /// `increase(time, value [, wrap_bits])`.
    pub fn increase() -> Self {
        Self::make("increase", CounterOutput::Increase, None)
    }

    /// `rate(time, value [, wrap_bits])`.
    pub fn rate() -> Self {
        Self::make("rate", CounterOutput::Rate, None)
    }

    /// `normalized_increase(time, value, metric)` over `catalog` (the store's: see
    /// `crate::catalog`).
    pub fn normalized_increase(catalog: Arc<MetricCatalog>) -> Self {
        Self::make("normalized_increase", CounterOutput::Increase, Some(catalog))
    }

    /// `normalized_rate(time, value, metric)` over `catalog`.
    pub fn normalized_rate(catalog: Arc<MetricCatalog>) -> Self {
        Self::make("normalized_rate", CounterOutput::Rate, Some(catalog))
    }

    fn make(name: &'static str, output: CounterOutput, catalog: Option<Arc<MetricCatalog>>) -> Self {
        Self { name, output, catalog, signature: Signature::user_defined(Volatility::Immutable) }
    }
}

// DataFusion compares function implementations; two instances are the same function when they
// have the same name and share the catalog.
impl PartialEq for CounterAggregate {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && match (&self.catalog, &other.catalog) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }
}

impl Eq for CounterAggregate {}

impl std::hash::Hash for CounterAggregate {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl AggregateUDFImpl for CounterAggregate {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        match self.catalog {
            None => counter::coerce_args(self.name, arg_types),
            Some(_) => counter::coerce_normalized_args(self.name, arg_types),
        }
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(match self.catalog {
            None => counter::state_fields(&args),
            Some(_) => counter::normalized_state_fields(&args),
        })
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        match &self.catalog {
            None => counter::accumulator(self.name, self.output, &args),
            Some(catalog) => counter::normalized_accumulator(self.name, self.output, &args, catalog.clone()),
        }
    }
}
