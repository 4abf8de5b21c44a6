//! `rate(time, value [, wrap_bits])`: per-second rate of a counter between the first and the
//! last sample of the group (or window frame): `increase(time, value [, wrap_bits])` divided
//! by the seconds from the first to the last sample.
//!
//! Shares the ordering, reset and wrap rules of `increase` (see `functions/counter.rs`); never
//! negative. Fewer than two samples, or all samples at one instant, give NULL. NULL times,
//! NULL/NaN/±inf values are ignored. Works as a window function, including sliding frames.
//! Cost: O(n) when samples arrive in time order, O(n log n) otherwise; O(n) memory per group.

use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::Result;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, Signature, Volatility};

use super::counter::{self, CounterOutput};

/// The `rate(time, value [, wrap_bits])` aggregate.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    signature: Signature,
}

impl Rate {
    /// Creates the UDAF implementation.
    pub fn new() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl Default for Rate {
    fn default() -> Self {
        Self::new()
    }
}

impl AggregateUDFImpl for Rate {
    fn name(&self) -> &str {
        "rate"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        counter::coerce_args("rate", arg_types)
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(counter::state_fields(&args))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        counter::accumulator("rate", CounterOutput::Rate, &args)
    }
}
