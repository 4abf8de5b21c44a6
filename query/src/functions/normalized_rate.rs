//! `normalized_rate(time, value, metric)`: per-second growth of a counter, in the catalog's unit per second, following the metric
//! catalog's rules for the group's metric: its counter width (16/32/64-bit wrap, or saturation
//! of the IB PortCounters fields), the 32-bit wrap of a 64-bit data counter served from the
//! 32-bit PortCounters, and its unit scale (×4 for the infiniband_exporter's octets/4 data
//! counters). Families the catalog does not know as counters get the plain reset rule of
//! `rate` with scale 1.
//!
//! A group must hold one metric (group by `series_id`, or filter one metric); two metrics are a
//! planning error naming both. A saturated counter that stayed at its maximum makes the result
//! NULL (the growth is unknown). Otherwise as `rate`: NULL times and NULL/NaN/±inf values
//! are ignored, fewer than two samples give NULL; window frames work, including sliding ones.
//! Cost: O(n) when samples arrive in time order, O(n log n) otherwise; O(n) memory per group.

use std::sync::Arc;

use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::Result;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, Signature, Volatility};
use lockstep_engine::metrics::MetricCatalog;

use super::counter::{self, CounterOutput};

/// The `normalized_rate(time, value, metric)` aggregate over a metric catalog.
#[derive(Debug)]
pub struct NormalizedRate {
    signature: Signature,
    catalog: Arc<MetricCatalog>,
}

impl NormalizedRate {
    /// Creates the UDAF implementation over `catalog` (the store's: see `crate::catalog`).
    pub fn new(catalog: Arc<MetricCatalog>) -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable), catalog }
    }
}

// DataFusion compares function implementations; two instances are the same function when
// they share the catalog.
impl PartialEq for NormalizedRate {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.catalog, &other.catalog)
    }
}

impl Eq for NormalizedRate {}

impl std::hash::Hash for NormalizedRate {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name().hash(state);
    }
}

impl AggregateUDFImpl for NormalizedRate {
    fn name(&self) -> &str {
        "normalized_rate"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        counter::coerce_normalized_args("normalized_rate", arg_types)
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(counter::normalized_state_fields(&args))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        counter::normalized_accumulator("normalized_rate", CounterOutput::Rate, &args, self.catalog.clone())
    }
}
