//! The Lockstep SQL functions, one file per function under `functions/`.
//!
//! [`register_all`] adds them to a DataFusion `SessionContext`. Each function is documented
//! in `docs/sql-functions.md` and tested by its own sqllogictest file in `query/tests/slt/`.

use std::sync::Arc;

use datafusion::prelude::SessionContext;
use lockstep_engine::analysis::Stop;
use lockstep_engine::metrics::MetricCatalog;

pub mod approx_quantile;
pub mod before;
mod bounded;
mod bounded_agg;
pub(crate) use bounded::BroadcastConcat;
pub(crate) use bounded_agg::WindowedAggregates;
pub mod change_points;
mod constant_args;
pub(crate) mod counter;
pub mod counters;
pub mod ddsketch;
pub mod ddsketch_merge;
pub mod ddsketch_quantile;
pub mod gap_fill;
mod group_rows;
pub mod lag_corr;
pub mod onset;
mod pg_compat;
mod point_state;
pub mod quantile_cont;
pub mod throttle_reasons;
pub mod value_at;
pub mod whole_series;

/// Registers every Lockstep SQL function on `ctx`, the catalog-aware ones over the built-in
/// metric catalog.
pub fn register_all(ctx: &SessionContext) {
    register_all_with_catalog(ctx, Arc::new(MetricCatalog::builtin()));
}

/// Registers every Lockstep SQL function on `ctx`; `normalized_increase` and `normalized_rate`
/// follow `catalog` (a store's: [`crate::catalog::store_catalog`]).
pub fn register_all_with_catalog(ctx: &SessionContext, catalog: Arc<MetricCatalog>) {
    use datafusion::logical_expr::AggregateUDF;
    bounded::register(ctx);
    bounded_agg::register(ctx);
    pg_compat::register(ctx);
    // Under casts of text to arrays (crate::pg_array); registered so a plan sent to a worker names them.
    for lenient in [false, true] {
        ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(crate::pg_array::TextArray::new(lenient)));
    }
    register_time_series_functions(ctx);
    register_analysis_functions(ctx);
    ctx.register_udaf(AggregateUDF::from(counters::CounterAggregate::normalized_increase(catalog.clone())));
    ctx.register_udaf(AggregateUDF::from(counters::CounterAggregate::normalized_rate(catalog)));
}

/// Registers the correlation and change-point functions: `lag_corr`, `change_points`, `onset`,
/// under the session's stop flag (a [`Stop`] extension of its config, which
/// [`crate::QueryEngine`] sets: the statement's; none, a flag never set).
fn register_analysis_functions(ctx: &SessionContext) {
    use datafusion::logical_expr::AggregateUDF;
    let stop = ctx.state_ref().read().config().get_extension::<Stop>().map(|s| s.as_ref().clone()).unwrap_or_default();
    ctx.register_udaf(AggregateUDF::from(lag_corr::LagCorr::with_stop(stop.clone())));
    ctx.register_udaf(AggregateUDF::from(change_points::ChangePoints::with_stop(stop.clone())));
    ctx.register_udaf(AggregateUDF::from(onset::Onset::with_stop(stop)));
}

/// Registers the time-series functions: percentiles and sketches, counters, gap filling,
/// clock-aware ordering (`before`), decoders (`throttle_reasons`).
fn register_time_series_functions(ctx: &SessionContext) {
    use datafusion::logical_expr::{AggregateUDF, ScalarUDF};
    for udaf in quantile_cont::udafs().into_iter().chain(approx_quantile::udafs()) {
        ctx.register_udaf(udaf);
    }
    ctx.register_udaf(AggregateUDF::from(ddsketch::DdSketchAgg::new()));
    ctx.register_udaf(AggregateUDF::from(ddsketch_merge::DdSketchMerge::new()));
    ctx.register_udf(ScalarUDF::from(ddsketch_quantile::DdSketchQuantile::new()));
    ctx.register_udaf(AggregateUDF::from(counters::CounterAggregate::increase()));
    ctx.register_udaf(AggregateUDF::from(counters::CounterAggregate::rate()));
    let pool = ctx.runtime_env().memory_pool.clone();
    ctx.register_udaf(AggregateUDF::from(gap_fill::GapFill::with_pool(pool)));
    ctx.register_udaf(AggregateUDF::from(value_at::ValueAt::new()));
    ctx.register_udf(ScalarUDF::from(before::Before::new()));
    ctx.register_udf(ScalarUDF::from(throttle_reasons::ThrottleReasonsFn::new()));
}
