//! Session construction and Lockstep's physical-plan rule for whole-series aggregates.
//!
//! DataFusion runs a parallel `GROUP BY` as a partial aggregation per input partition, a hash
//! repartition of the partial states, and a final aggregation. That pays when a state is small
//! (a sum, a count, a sketch). The state of `lag_corr`, `onset`, `change_points`, the exact
//! quantiles, `array_agg` and `string_agg` is every input row of the group, so the partial phase
//! only copies the rows into state lists, the repartition copies them again and the final phase
//! a third time. Under a memory limit it is worse: a partial phase out of memory hands its states
//! on early, a few rows of many megabytes each, and the repartition gathers them into batches of
//! thousands of rows outside any reservation (QA pass 23b: `array_agg` of 1.2 GB of text took
//! 4 GB under a limit of 256 MiB before it failed).
//! [`WholeSeriesAggregates`] rewrites
//!
//! ```text
//! AggregateExec(FinalPartitioned) <- RepartitionExec(Hash) <- AggregateExec(Partial) <- input
//! ```
//!
//! into `AggregateExec(SinglePartitioned) <- RepartitionExec(Hash on the group keys) <- input`
//! whenever one of the aggregates keeps whole series: the raw rows are repartitioned once and
//! each partition aggregates its groups completely. When the group keys include `series_id`
//! and the input is a `samples` scan, the scan itself hands each partition whole series
//! ([`SamplesExec::by_series`]) and no row is repartitioned at all. Sketch aggregates
//! (`approx_percentile_cont`, `approx_distinct`, …) are rewritten in that case only: their
//! states outweigh the rows of fine per-series groups, but not of coarse groups. Results are identical (the
//! same groups meet in the same partition); only copies are saved. A plan that pairs the
//! partitions of two inputs (a partitioned join, an interleave) is left alone: it was planned
//! for the partitioning of the aggregate it replaces.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{FunctionalDependencies, Result};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::config::SessionConfig;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode, SortMergeJoinExec, SymmetricHashJoinExec};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::union::InterleaveExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};
use datafusion::prelude::SessionContext;

use crate::samples::exec::SamplesExec;

mod no_spill;

/// Aggregates whose state is all of the group's rows (or, for `string_agg`, all its text).
const WHOLE_SERIES: &[&str] = &[
    "lag_corr",
    "onset",
    "change_points",
    "quantile_cont",
    "p50",
    "p90",
    "p95",
    "p99",
    "p999",
    "array_agg",
    "string_agg",
];

/// Aggregates whose state is a sketch: small for a large group, but for the fine groups of a
/// per-series, per-bucket query (a handful of rows each) a t-digest or an HLL register set
/// outweighs the rows, and the partial phase, the repartition of every group's state and the
/// final merge cost more than the aggregation itself (on 2 cores the real RoCE counters' per
/// series, per 10 s `approx_percentile_cont` took twice as long as on 1). They are rewritten
/// only when the scan can hand each partition whole series, so that no row and no state is
/// repartitioned at all; grouped otherwise, they keep DataFusion's plan.
const SKETCHES: &[&str] =
    &["approx_percentile_cont", "approx_percentile_cont_with_weight", "approx_median", "approx_distinct"];

/// The `samples` column that identifies a series.
const SERIES_ID: &str = "series_id";

/// The physical optimizer rule described in the [module docs](self).
#[derive(Debug)]
pub struct WholeSeriesAggregates {
    series_scans: bool,
}

impl WholeSeriesAggregates {
    /// The rule; with `series_scans`, a `samples` scan under a whole-series aggregate grouped
    /// by `series_id` hands each partition whole series instead of being repartitioned (not in
    /// a distributed plan, whose tasks split a scan by its units).
    pub fn new(series_scans: bool) -> Self {
        WholeSeriesAggregates { series_scans }
    }
}

impl Default for WholeSeriesAggregates {
    fn default() -> Self {
        WholeSeriesAggregates::new(true)
    }
}

impl PhysicalOptimizerRule for WholeSeriesAggregates {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        // The rewrite hashes on fewer keys than the aggregate it replaces did; an operator that
        // pairs partition i of two inputs relies on both being hashed on the same keys.
        if plan.exists(|n| Ok(pairs_partitions(n)))? {
            return Ok(plan);
        }
        let plan = plan
            .transform_up(|node| {
                Ok(rewrite(&node, self.series_scans)?.map_or_else(|| Transformed::no(node), Transformed::yes))
            })
            .map(|t| t.data)?;
        // Not in a distributed plan: its workers would have to know the node.
        if !self.series_scans {
            return Ok(plan);
        }
        plan.transform_up(|node| Ok(without_spilling(&node)?.map_or_else(|| Transformed::no(node), Transformed::yes)))
            .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "lockstep_whole_series_aggregates"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Whether `node` combines the i-th partitions of its inputs, assuming they are hash
/// partitioned alike: a partitioned hash join, a sort-merge or symmetric hash join, or an
/// interleave.
fn pairs_partitions(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.downcast_ref::<HashJoinExec>().is_some_and(|j| *j.partition_mode() == PartitionMode::Partitioned)
        || node.downcast_ref::<SortMergeJoinExec>().is_some()
        || node.downcast_ref::<SymmetricHashJoinExec>().is_some()
        || node.downcast_ref::<InterleaveExec>().is_some()
}

/// The rewritten plan for `node`, or `None` when it does not match.
fn rewrite(node: &Arc<dyn ExecutionPlan>, series_scans: bool) -> Result<Option<Arc<dyn ExecutionPlan>>> {
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
    let sketch = partial.aggr_expr().iter().any(|a| SKETCHES.contains(&a.fun().name()));
    // An aggregate with ORDER BY gets its input sorted below the partial phase; a repartition
    // in between would lose that order.
    let ordered = partial.aggr_expr().iter().any(|a| !a.order_bys().is_empty());
    if *partial.mode() != AggregateMode::Partial
        || !(whole_series || sketch)
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
    // Better still, a scan that hands each partition whole series needs no repartition.
    let split = match series.first().and_then(|e| e.downcast_ref::<Column>()) {
        Some(c) if series_scans => split_by_series(partial.input(), c.index(), *partitions)?,
        _ => None,
    };
    let input = match split {
        Some(split) => split,
        // A sketch's state is small for large groups: without a series split, keep the plan.
        None if !whole_series => return Ok(None),
        None => Arc::new(RepartitionExec::try_new(
            Arc::clone(partial.input()),
            Partitioning::Hash(if series.is_empty() { keys } else { series }, *partitions),
        )?),
    };
    let single = AggregateExec::try_new(
        AggregateMode::SinglePartitioned,
        partial.group_expr().clone(),
        partial.aggr_expr().to_vec(),
        partial.filter_expr().to_vec(),
        input,
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

/// Aggregates whose state for a group is all of its values, which no spill file makes fit.
const GROUP_VALUES: &[&str] = &["array_agg", "string_agg"];

/// `node` run without spill files ([`no_spill`]) when it is a grouped aggregate past its partial
/// phase with one of [`GROUP_VALUES`]; `None` otherwise.
fn without_spilling(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(aggregate) = node.downcast_ref::<AggregateExec>() else {
        return Ok(None);
    };
    // Not with ORDER BY: such an aggregate keeps its two phases (the order is made below the
    // partial one), and its usual use, a sorted list per series over many series, spills well;
    // without spilling it was refused at a fifth of the limit (QA pass 24 F6).
    if *aggregate.mode() == AggregateMode::Partial
        || aggregate.group_expr().is_empty()
        || !aggregate.aggr_expr().iter().any(|a| GROUP_VALUES.contains(&a.fun().name()))
        || aggregate.aggr_expr().iter().any(|a| !a.order_bys().is_empty())
    {
        return Ok(None);
    }
    let input = Arc::new(no_spill::NoSpillExec::restore(Arc::clone(aggregate.input())));
    let aggregate = replace_children_if_necessary(Arc::clone(node), vec![input])?;
    Ok(Some(Arc::new(no_spill::NoSpillExec::new(aggregate))))
}

/// `plan` with its `samples` scan split by series ([`SamplesExec::by_series`]) into
/// `partitions`, when output column `column` is the scan's `series_id` passed through
/// projections and filters (which keep rows in their partition); `None` otherwise.
fn split_by_series(
    plan: &Arc<dyn ExecutionPlan>,
    column: usize,
    partitions: usize,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if let Some(scan) = plan.downcast_ref::<SamplesExec>() {
        let split = scan.is_series_id(column).then(|| scan.by_series(partitions)).flatten();
        return Ok(split.map(|s| Arc::new(s) as Arc<dyn ExecutionPlan>));
    }
    let below = if let Some(p) = plan.downcast_ref::<ProjectionExec>() {
        p.expr().get(column).and_then(|e| e.expr.downcast_ref::<Column>()).map(Column::index)
    } else if let Some(f) = plan.downcast_ref::<FilterExec>() {
        match f.projection() {
            Some(projection) => projection.get(column).copied(),
            None => Some(column),
        }
    } else {
        None
    };
    let children = plan.children();
    let (Some(below), [child]) = (below, children.as_slice()) else {
        return Ok(None);
    };
    match split_by_series(child, below, partitions)? {
        Some(split) => Ok(Some(replace_children_if_necessary(Arc::clone(plan), vec![split])?)),
        None => Ok(None),
    }
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
    session_builder_with(config, true)
}

/// [`session_builder`]; `series_scans` as in [`WholeSeriesAggregates::new`].
pub(crate) fn session_builder_with(config: SessionConfig, series_scans: bool) -> SessionStateBuilder {
    SessionStateBuilder::new()
        .with_config(config)
        .with_default_features()
        .with_analyzer_rules(crate::pg_array::analyzer_rules())
        .with_optimizer_rules(optimizer_rules())
        .with_physical_optimizer_rule(Arc::new(WholeSeriesAggregates::new(series_scans)))
}

/// DataFusion's logical optimizer rules, each of those that read functional dependencies (to
/// drop a sort or GROUP BY key another one "determines", a DISTINCT, or to take a join side as
/// unique) preceded by [`UnnestForgetsKeys`] — a rule before it can rebuild an unnest, which
/// takes its input's dependencies again — and, after them all, [`crate::functions::BroadcastConcat`].
fn optimizer_rules() -> Vec<Arc<dyn datafusion::optimizer::OptimizerRule + Send + Sync>> {
    const READ_DEPENDENCIES: [&str; 5] = [
        "replace_distinct_aggregate",
        "eliminate_join",
        "eliminate_duplicated_expr",
        "eliminate_group_by_constant",
        "optimize_projections",
    ];
    let mut rules = Vec::new();
    for rule in datafusion::optimizer::Optimizer::new().rules {
        if READ_DEPENDENCIES.contains(&rule.name()) {
            rules.push(Arc::new(UnnestForgetsKeys) as Arc<_>);
        }
        rules.push(rule);
    }
    // After constants are folded (`repeat('x', n)` is a literal by then).
    rules.push(Arc::new(crate::functions::BroadcastConcat));
    rules.push(Arc::new(crate::functions::WindowedAggregates));
    rules
}

/// An optimizer rule that clears the functional dependencies of every `unnest` (and recomputes
/// the schemas above it). DataFusion's unnest keeps its input's, but one input row becomes
/// many: a GROUP BY key that determined every column before the unnest determines nothing
/// after it. With them kept, `SELECT k, count(*) FROM (SELECT k, unnest(array_agg(v)) AS u …
/// GROUP BY k) GROUP BY k, u` lost its key `u` and counted one group where there are two (the
/// review of QA pass 22's finding; apache/datafusion#24787).
#[derive(Debug)]
struct UnnestForgetsKeys;

impl datafusion::optimizer::OptimizerRule for UnnestForgetsKeys {
    fn name(&self) -> &str {
        "lockstep_unnest_forgets_keys"
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn datafusion::optimizer::OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let keyed = |n: &LogicalPlan| matches!(n, LogicalPlan::Unnest(u) if *u.schema.functional_dependencies() != FunctionalDependencies::empty());
        if !plan.exists(|n| Ok(keyed(n)))? {
            return Ok(Transformed::no(plan));
        }
        let plan = plan
            .transform_up(|node| {
                Ok(Transformed::yes(match node.recompute_schema()? {
                    LogicalPlan::Unnest(mut u) => {
                        let schema =
                            u.schema.as_ref().clone().with_functional_dependencies(FunctionalDependencies::empty())?;
                        u.schema = Arc::new(schema);
                        LogicalPlan::Unnest(u)
                    }
                    other => other,
                }))
            })?
            .data;
        Ok(Transformed::yes(plan))
    }
}

/// `plan` with every join — above all those that compute their output from buffered input, a
/// nested-loop join (a non-equi join such as `a.value < b.value`), a cross join — under
/// DataFusion's [`CooperativeExec`](datafusion::physical_plan::coop::CooperativeExec), which
/// gives the task back to the runtime every so many batches. Such a join produces batch after
/// batch from memory without waiting on its inputs, so the task running the statement never
/// yields, and aborting it (a cancel request, a statement timeout) takes effect only when the
/// join ends: a cross join stopped after 15 s kept the PostgreSQL listener's statement threads
/// busy for 21 minutes, and every other client's statements timed out (QA pass 23b).
pub fn yielding_joins(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    use datafusion::physical_plan::coop::CooperativeExec;
    use datafusion::physical_plan::joins::{CrossJoinExec, NestedLoopJoinExec, PiecewiseMergeJoinExec};
    plan.transform_up(|node| {
        // Hash and merge joins too: with many rows to a key they also produce from memory.
        if node.downcast_ref::<NestedLoopJoinExec>().is_some()
            || node.downcast_ref::<CrossJoinExec>().is_some()
            || node.downcast_ref::<PiecewiseMergeJoinExec>().is_some()
            || node.downcast_ref::<HashJoinExec>().is_some()
            || node.downcast_ref::<SortMergeJoinExec>().is_some()
            || node.downcast_ref::<SymmetricHashJoinExec>().is_some()
        {
            Ok(Transformed::yes(Arc::new(CooperativeExec::new(node)) as Arc<dyn ExecutionPlan>))
        } else {
            Ok(Transformed::no(node))
        }
    })
    .map(|t| t.data)
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

    /// Rows unnested from a list per group are sorted by every key (QA pass 22: the sort kept
    /// only the group key; the rows came out in the lists' order), and grouped by every key.
    #[tokio::test]
    async fn a_sort_key_after_unnest_is_kept() {
        let ctx = context(SessionConfig::new());
        let sql = "SELECT k, u['x'] AS x FROM (SELECT k, unnest(array_agg(named_struct('x', v))) AS u \
                   FROM (VALUES (1, 3), (1, 1), (2, 9), (1, 2), (2, 7)) t(k, v) GROUP BY k) ORDER BY k, x";
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let got: Vec<(i64, i64)> = batches
            .iter()
            .flat_map(|b| {
                let k = arrow::compute::cast(b.column(0), &DataType::Int64).unwrap();
                let x = arrow::compute::cast(b.column(1), &DataType::Int64).unwrap();
                let (k, x) = (
                    k.as_any().downcast_ref::<Int64Array>().unwrap().clone(),
                    x.as_any().downcast_ref::<Int64Array>().unwrap().clone(),
                );
                (0..b.num_rows()).map(move |i| (k.value(i), x.value(i)))
            })
            .collect();
        assert_eq!(got, [(1, 1), (1, 2), (1, 3), (2, 7), (2, 9)]);
        // A group key and a DISTINCT after the unnest are kept too (one group per (k, x)).
        let unnested = "SELECT k, unnest(array_agg(v)) AS x FROM (VALUES (1, 3), (1, 1), (1, 3)) t(k, v) GROUP BY k";
        for (sql, want) in [
            (format!("SELECT count(*) FROM (SELECT k, x, count(*) AS n FROM ({unnested}) GROUP BY k, x)"), 2),
            (format!("SELECT count(*) FROM (SELECT DISTINCT k, x FROM ({unnested}))"), 2),
        ] {
            let batches = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
            let n = batches[0].column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0);
            assert_eq!(n, want, "{sql}");
        }
    }

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

    /// A partitioned join of a whole-series aggregate with another aggregate on the same keys
    /// pairs partition i of both sides, as they were planned: the rule must leave that plan
    /// alone (hashing one side on the series id alone would pair different groups).
    #[tokio::test]
    async fn partitioned_joins_keep_the_partitioning_they_were_planned_for() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("g", DataType::Int32, false),
            Field::new("t", DataType::Int64, false),
            Field::new("v", DataType::Float64, false),
        ]));
        let parts: Vec<Vec<RecordBatch>> = (0..3)
            .map(|p| {
                let n = 400;
                vec![
                    RecordBatch::try_new(
                        schema.clone(),
                        vec![
                            Arc::new(Int32Array::from_iter_values((0..n).map(|r| (r * 7 + p) % 13))),
                            Arc::new(Int64Array::from_iter_values((0..n).map(|r| i64::from(p * n + r) * 1_000))),
                            Arc::new(Float64Array::from_iter_values((0..n).map(|r| f64::from((r * 13 + p) % 17)))),
                        ],
                    )
                    .unwrap(),
                ]
            })
            .collect();
        let table = Arc::new(MemTable::try_new(schema, parts).unwrap());
        let config = || {
            let mut c = SessionConfig::new().with_target_partitions(3).with_batch_size(16);
            c.options_mut().optimizer.hash_join_single_partition_threshold = 0;
            c.options_mut().optimizer.hash_join_single_partition_threshold_rows = 0;
            c
        };
        let ours = context(config());
        ours.register_table("s", table.clone()).unwrap();
        let plain = SessionContext::new_with_config(config());
        crate::functions::register_all(&plain);
        plain.register_table("s", table).unwrap();
        let q = "WITH x AS (SELECT g AS series_id, t, v FROM s), \
                 p AS (SELECT series_id, t / 50000 AS b, p99(v) AS p FROM x GROUP BY 1, 2), \
                 m AS (SELECT series_id, t / 50000 AS b, sum(v) AS m FROM x GROUP BY 1, 2) \
                 SELECT count(*), sum(p.p * 1000 + m.m) FROM p JOIN m ON p.series_id = m.series_id AND p.b = m.b";
        let (plan, result) = run(&ours, q).await;
        assert!(plan.contains("mode=Partitioned"), "{plan}");
        let (_, expected) = run(&plain, q).await;
        assert_eq!(result, expected, "{plan}");
        // Every group of `p` meets its group of `m`.
        let groups = run(&plain, "SELECT count(*) FROM (SELECT DISTINCT g, t / 50000 FROM s)").await.1;
        let count = |table: &str| table.lines().nth(3).unwrap().split('|').nth(1).unwrap().trim().to_string();
        assert_eq!(count(&result), count(&groups), "{result}");
    }
}
