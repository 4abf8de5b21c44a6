//! `diagnose('job' [, from, to])`: the diagnosis as rows.
//!
//! Arguments are literals: the job name, and optionally the window as RFC 3339 strings,
//! timestamps or integer ns (reference time). Columns:
//!
//! | column | type | meaning |
//! |---|---|---|
//! | `job` | Utf8 | the job |
//! | `row_type` | Utf8 | `verdict` (one row, first), `suspect` (best first) or `chain` (corrected-time order) |
//! | `position` | Int64 | 0 for the verdict, the suspect's rank (1 = best) or the chain position (1 = earliest) |
//! | `time` | Timestamp(ns) | slowdown onset (verdict), suspect onset, or chain-link onset; NULL when healthy |
//! | `uncertainty_ns` | Int64 | clock uncertainty of `time` (9223372036854775807 = no clock model) |
//! | `bottleneck` | Utf8 | compute, network, storage, data_loading; NULL when healthy (same on every row) |
//! | `domain` | Utf8 | root-cause domain (verdict, suspects) or the signal's domain (chain) |
//! | `entity` | Utf8 | entity name (`node-03/gpu5`, `leaf-2:17`, `lustre-a`, ...) |
//! | `metric` | Utf8 | chain: the metric; NULL otherwise |
//! | `detail` | Utf8 | verdict text, the suspect's evidence joined by `; `, or the chain change (`0 → 340 errors/s`) |
//! | `score` | Float64 | suspect score in [0, 1]; NULL otherwise |
//! | `sql` | Utf8 | chain: SQL reproducing the link; suspects: SQL of their first evidence series |

use std::sync::Arc;

use arrow::array::{Float64Builder, Int64Builder, RecordBatch, StringBuilder, TimestampNanosecondBuilder};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::catalog::{MemTable, TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{ScalarValue, plan_err};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Expr;
use lockstep_engine::Store;
use lockstep_engine::topology::{parse_rfc3339, rfc3339_error};

use super::{DiagnoseOptions, Diagnosis, diagnose};

/// The `diagnose` table function over one store.
#[derive(Debug)]
pub struct DiagnoseFunc {
    store: Arc<Store>,
}

impl DiagnoseFunc {
    /// A function over `store`.
    pub fn new(store: Arc<Store>) -> Self {
        DiagnoseFunc { store }
    }
}

fn literal_time(expr: &Expr, i: usize) -> Result<i64> {
    match expr {
        Expr::Literal(
            ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) | ScalarValue::Utf8View(Some(s)),
            _,
        ) => parse_rfc3339(s).ok_or_else(|| {
            DataFusionError::Plan(format!("diagnose: argument {i}: {}", rfc3339_error(s).unwrap_or_default()))
        }),
        Expr::Literal(ScalarValue::Int64(Some(v)), _) => Ok(*v),
        Expr::Literal(ScalarValue::TimestampNanosecond(Some(v), _), _) => Ok(*v),
        Expr::Literal(ScalarValue::TimestampMicrosecond(Some(v), _), _) => Ok(v.saturating_mul(1_000)),
        Expr::Literal(ScalarValue::TimestampMillisecond(Some(v), _), _) => Ok(v.saturating_mul(1_000_000)),
        Expr::Literal(ScalarValue::TimestampSecond(Some(v), _), _) => Ok(v.saturating_mul(lockstep_engine::model::SEC)),
        _ => plan_err!("diagnose: argument {i} must be a time literal (RFC 3339 string, timestamp or integer ns)"),
    }
}

impl TableFunctionImpl for DiagnoseFunc {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let exprs = args.exprs();
        if !(exprs.len() == 1 || exprs.len() == 3) {
            return plan_err!("diagnose takes 'job' or 'job', from, to; got {} argument(s)", exprs.len());
        }
        let job = match &exprs[0] {
            Expr::Literal(
                ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) | ScalarValue::Utf8View(Some(s)),
                _,
            ) => s.clone(),
            _ => return plan_err!("diagnose: argument 1 must be a string literal (the job)"),
        };
        let mut opts = DiagnoseOptions::default();
        if exprs.len() == 3 {
            opts.from = Some(literal_time(&exprs[1], 2)?);
            opts.to = Some(literal_time(&exprs[2], 3)?);
        }
        let d = diagnose(&self.store, &job, &opts).map_err(|e| DataFusionError::External(Box::new(e)))?;
        let batch = to_batch(&d)?;
        Ok(Arc::new(MemTable::try_new(batch.schema(), vec![vec![batch]])?))
    }
}

/// The schema of the `diagnose` table function.
pub fn schema() -> Arc<Schema> {
    let s = |n: &str, null: bool| Field::new(n, DataType::Utf8, null);
    Arc::new(Schema::new(vec![
        s("job", false),
        s("row_type", false),
        Field::new("position", DataType::Int64, false),
        Field::new("time", DataType::Timestamp(TimeUnit::Nanosecond, None), true),
        Field::new("uncertainty_ns", DataType::Int64, true),
        s("bottleneck", true),
        s("domain", true),
        s("entity", true),
        s("metric", true),
        s("detail", true),
        Field::new("score", DataType::Float64, true),
        s("sql", true),
    ]))
}

/// The diagnosis as one record batch of [`schema`].
pub fn to_batch(d: &Diagnosis) -> Result<RecordBatch> {
    let mut job = StringBuilder::new();
    let mut row_type = StringBuilder::new();
    let mut position = Int64Builder::new();
    let mut time = TimestampNanosecondBuilder::new();
    let mut unc = Int64Builder::new();
    let mut bottleneck = StringBuilder::new();
    let mut domain = StringBuilder::new();
    let mut entity = StringBuilder::new();
    let mut metric = StringBuilder::new();
    let mut detail = StringBuilder::new();
    let mut score = Float64Builder::new();
    let mut sql = StringBuilder::new();
    let mut row = |kind: &str,
                   pos: i64,
                   t: Option<i64>,
                   u: Option<i64>,
                   dom: Option<&str>,
                   ent: Option<&str>,
                   met: Option<&str>,
                   det: &str,
                   sc: Option<f64>,
                   q: Option<&str>| {
        job.append_value(&d.job);
        row_type.append_value(kind);
        position.append_value(pos);
        time.append_option(t);
        unc.append_option(u);
        bottleneck.append_option(d.bottleneck.as_deref());
        domain.append_option(dom);
        entity.append_option(ent);
        metric.append_option(met);
        detail.append_value(det);
        score.append_option(sc);
        sql.append_option(q);
    };
    let top = d.suspects.first();
    row(
        "verdict",
        0,
        d.slowdown.time,
        d.slowdown.uncertainty_ns,
        d.root_cause_domain.as_deref(),
        top.map(|s| s.entity.as_str()),
        None,
        &d.verdict,
        top.map(|s| s.score),
        None,
    );
    for (i, s) in d.suspects.iter().enumerate() {
        row(
            "suspect",
            i as i64 + 1,
            Some(s.onset),
            Some(s.uncertainty_ns),
            Some(&s.domain),
            Some(&s.entity),
            None,
            &s.evidence.join("; "),
            Some(s.score),
            s.sql.first().map(String::as_str),
        );
    }
    for (i, c) in d.chain.iter().enumerate() {
        row(
            "chain",
            i as i64 + 1,
            Some(c.time),
            Some(c.uncertainty_ns),
            Some(&c.domain),
            Some(&c.entity),
            Some(&c.metric),
            &c.change,
            None,
            Some(&c.sql),
        );
    }
    Ok(RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(job.finish()),
            Arc::new(row_type.finish()),
            Arc::new(position.finish()),
            Arc::new(time.finish()),
            Arc::new(unc.finish()),
            Arc::new(bottleneck.finish()),
            Arc::new(domain.finish()),
            Arc::new(entity.finish()),
            Arc::new(metric.finish()),
            Arc::new(detail.finish()),
            Arc::new(score.finish()),
            Arc::new(sql.finish()),
        ],
    )?)
}
