//! Session construction and Lockstep's physical-plan rule for whole-series aggregates.
//!
//! DataFusion runs a parallel `GROUP BY` as a partial aggregation per input partition, a hash
//! repartition of the partial states, and a final aggregation. That pays when a state is small
//! (a sum, a count, a sketch). The state of `lag_corr`, `onset`, `change_points` and the exact
//! quantiles is every input row of the group, so the partial phase only copies the rows into
//! state lists, the repartition copies them again and the final phase a third time.
//! [`WholeSeriesAggregates`] rewrites
//!
//! ```text
//! AggregateExec(FinalPartitioned) <- RepartitionExec(Hash) <- AggregateExec(Partial) <- input
//! ```
//!
//! into `AggregateExec(SinglePartitioned) <- RepartitionExec(Hash on the group keys) <- input`
//! whenever one of the aggregates keeps whole series: the raw rows are repartitioned once and
//! each partition aggregates its groups completely. Results are identical (the same groups
//! meet in the same partition); only copies are saved.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::config::SessionConfig;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::session_state::SessionState;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};
use datafusion::prelude::SessionContext;

/// Aggregates whose state is all of the group's rows.
const WHOLE_SERIES: &[&str] =
    &["lag_corr", "onset", "change_points", "quantile_cont", "p50", "p90", "p95", "p99", "p999"];

/// The `samples` column that identifies a series.
const SERIES_ID: &str = "series_id";

/// The physical optimizer rule described in the [module docs](self).
#[derive(Debug, Default)]
pub struct WholeSeriesAggregates;

impl PhysicalOptimizerRule for WholeSeriesAggregates {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| Ok(rewrite(&node)?.map_or_else(|| Transformed::no(node), Transformed::yes)))
            .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "lockstep_whole_series_aggregates"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The rewritten plan for `node`, or `None` when it does not match.
fn rewrite(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(last) = node.downcast_ref::<AggregateExec>() else {
        return Ok(None);
    };
    if *last.mode() != AggregateMode::FinalPartitioned || last.limit_options().is_some() {
        return Ok(None);
    }
    let Some(repartition) = last.input().downcast_ref::<RepartitionExec>() else {
        return Ok(None);
    };
    let Partitioning::Hash(_, partitions) = repartition.partitioning() else {
        return Ok(None);
    };
    let Some(partial) = repartition.input().downcast_ref::<AggregateExec>() else {
        return Ok(None);
    };
    let whole_series = partial.aggr_expr().iter().any(|a| WHOLE_SERIES.contains(&a.fun().name()));
    // An aggregate with ORDER BY gets its input sorted below the partial phase; a repartition
    // in between would lose that order.
    let ordered = partial.aggr_expr().iter().any(|a| !a.order_bys().is_empty());
    if *partial.mode() != AggregateMode::Partial
        || !whole_series
        || ordered
        || !partial.group_expr().is_single()
        || partial.group_expr().is_empty()
        || partial.limit_options().is_some()
    {
        return Ok(None);
    }
    // Every row of a group has one series: hashing on the series id alone keeps each group in
    // one partition and spares evaluating and hashing the other keys (a `date_bin` per row).
    let keys = partial.group_expr().input_exprs();
    let series: Vec<_> = keys
        .iter()
        .filter(|e| e.downcast_ref::<Column>().is_some_and(|c| c.name() == SERIES_ID))
        .take(1)
        .cloned()
        .collect();
    let hashed = RepartitionExec::try_new(
        Arc::clone(partial.input()),
        Partitioning::Hash(if series.is_empty() { keys } else { series }, *partitions),
    )?;
    let single = AggregateExec::try_new(
        AggregateMode::SinglePartitioned,
        partial.group_expr().clone(),
        partial.aggr_expr().to_vec(),
        partial.filter_expr().to_vec(),
        Arc::new(hashed),
        partial.input_schema(),
    )?;
    // Same columns, same types: otherwise leave the plan alone.
    let same = single.schema().fields().len() == last.schema().fields().len()
        && single
            .schema()
            .fields()
            .iter()
            .zip(last.schema().fields())
            .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
    Ok(same.then(|| Arc::new(single) as Arc<dyn ExecutionPlan>))
}

/// A session state with DataFusion's defaults (an unbounded memory pool) and Lockstep's plan
/// rule.
pub fn session_state(config: SessionConfig) -> SessionState {
    session_builder(config).build()
}

/// A session state with Lockstep's plan rule over `runtime` (memory pool and spill files:
/// [`crate::limits::QueryLimits::runtime_env`]).
pub fn session_state_with_runtime(config: SessionConfig, runtime: Arc<RuntimeEnv>) -> SessionState {
    session_builder(config).with_runtime_env(runtime).build()
}

pub(crate) fn session_builder(config: SessionConfig) -> SessionStateBuilder {
    SessionStateBuilder::new()
        .with_config(config)
        .with_default_features()
        .with_physical_optimizer_rule(Arc::new(WholeSeriesAggregates))
}

/// A SQL context with the Lockstep functions (built-in metric catalog) and plan rule, without
/// any table: for tests, benchmarks and embedding over your own tables. Its memory is not
/// limited: see [`context_with_limits`].
pub fn context(config: SessionConfig) -> SessionContext {
    let ctx = SessionContext::new_with_state(session_state(config));
    crate::functions::register_all(&ctx);
    ctx
}

/// [`context`] under a memory limit (and spilling) as a [`crate::QueryEngine`] has.
pub fn context_with_limits(config: SessionConfig, limits: &crate::limits::QueryLimits) -> Result<SessionContext> {
    let ctx = SessionContext::new_with_state(session_state_with_runtime(limits.fit(config), limits.runtime_env()?));
    crate::functions::register_all(&ctx);
    Ok(ctx)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, Int32Array, Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::util::pretty::pretty_format_batches;
    use datafusion::datasource::MemTable;

    async fn run(ctx: &SessionContext, sql: &str) -> (String, String) {
        let df = ctx.sql(sql).await.unwrap();
        let plan = df.clone().create_physical_plan().await.unwrap();
        let text = datafusion::physical_plan::displayable(plan.as_ref()).indent(true).to_string();
        let out = df.collect().await.unwrap();
        (text, pretty_format_batches(&out).unwrap().to_string())
    }

    /// The rewrite happens for whole-series aggregates only and gives the same answers as
    /// DataFusion's partial/final plan.
    #[tokio::test]
    async fn whole_series_group_by_is_aggregated_once_with_identical_results() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("g", DataType::Int32, false),
            Field::new("t", DataType::Int64, false),
            Field::new("v", DataType::Float64, false),
        ]));
        let mut parts = vec![Vec::new(), Vec::new(), Vec::new()];
        for i in 0..30 {
            let n = 50;
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int32Array::from_iter_values((0..n).map(|r| (r * 7 + i) % 11))),
                    Arc::new(Int64Array::from_iter_values((0..n).map(|r| i64::from(i * n + r) * 1_000))),
                    Arc::new(Float64Array::from_iter_values((0..n).map(|r| f64::from((r * 13 + i * 5) % 17)))),
                ],
            )
            .unwrap();
            parts[i as usize % 3].push(batch);
        }
        let table = Arc::new(MemTable::try_new(schema, parts).unwrap());
        let config = || SessionConfig::new().with_target_partitions(3).with_batch_size(7);
        let ours = context(config());
        ours.register_table("s", table.clone()).unwrap();
        let plain = SessionContext::new_with_config(config());
        crate::functions::register_all(&plain);
        plain.register_table("s", table).unwrap();

        let q = "SELECT g, quantile_cont(v, 0.9) AS q, avg(v) AS a, count(*) AS n, \
                 change_points(t, v) AS cp FROM s GROUP BY g ORDER BY g";
        let (plan, result) = run(&ours, q).await;
        assert!(plan.contains("mode=SinglePartitioned"), "{plan}");
        assert!(!plan.contains("mode=Partial"), "{plan}");
        let (plain_plan, expected) = run(&plain, q).await;
        assert!(plain_plan.contains("mode=Partial"), "{plain_plan}");
        assert_eq!(result, expected);

        // Grouped by the series id and more: hashed on the series id alone, same answers.
        let q = "SELECT series_id, t / 7000 AS b, p99(v) AS p, count(*) AS n FROM \
                 (SELECT g AS series_id, t, v FROM s) GROUP BY series_id, t / 7000 ORDER BY 1, 2";
        let (plan, result) = run(&ours, q).await;
        assert!(plan.contains("partitioning=Hash([series_id@0], 3)"), "{plan}");
        assert_eq!(result, run(&plain, q).await.1);

        // Small states keep DataFusion's plan, and so does an ordered aggregate next to a
        // whole-series one (its sorted input must not be repartitioned).
        let (plan, _) = run(&ours, "SELECT g, sum(v) FROM s GROUP BY g").await;
        assert!(plan.contains("mode=Partial"), "{plan}");
        let q = "SELECT g, p50(v) AS m, array_agg(v ORDER BY t) AS a FROM s GROUP BY g ORDER BY g";
        let (plan, result) = run(&ours, q).await;
        assert!(!plan.contains("SinglePartitioned"), "{plan}");
        assert_eq!(result, run(&plain, q).await.1);
    }
}
