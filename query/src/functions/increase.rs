//! `increase(time, value [, wrap_bits])`: how much a counter grew between the first and the
//! last sample of the group (or window frame), across counter resets and, with `wrap_bits` =
//! 16, 32 or 64, across wrap-around of narrow hardware counters.
//!
//! The samples are ordered by `time` inside the aggregate (input order never matters) and the
//! non-negative steps between consecutive samples are summed; see `functions/counter.rs` for the
//! reset and wrap rules. No extrapolation to bucket edges: the increase spans exactly the
//! first to the last sample. Fewer than two samples give NULL. NULL times, NULL/NaN/±inf
//! values are ignored. Works as a window function, including sliding frames.
//! Cost: O(n) when samples arrive in time order, O(n log n) otherwise; O(n) memory per group.

use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::Result;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, Signature, Volatility};

use super::counter::{self, CounterOutput};

/// The `increase(time, value [, wrap_bits])` aggregate.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Increase {
    signature: Signature,
}

impl Increase {
    /// Creates the UDAF implementation.
    pub fn new() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl Default for Increase {
    fn default() -> Self {
        Self::new()
    }
}

impl AggregateUDFImpl for Increase {
    fn name(&self) -> &str {
        "increase"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        counter::coerce_args("increase", arg_types)
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(counter::state_fields(&args))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        counter::accumulator("increase", CounterOutput::Increase, &args)
    }
}
