//! Runs every `query/tests/slt/*.slt` sqllogictest file twice against a fresh DataFusion
//! `SessionContext` with all Lockstep SQL functions registered: once with Lockstep's plan rule
//! (`lockstep_query::plan`) and once with DataFusion's default partial/final aggregation.
//!
//! Value formatting: NULL as `NULL`, the empty string as `(empty)`, floats in Rust's shortest
//! round-trip form (`Debug` without a trailing `.0`, so results compare exactly: `2`, `0.1`,
//! `-4e307`, `NaN`, `inf`, `-inf`), everything else with Arrow's display formatter. Column type letters: `I` integers,
//! `R` floats, `T` strings, `?` anything else (types are not validated).
//! Run one file with `SLT_FILTER=quantile cargo test -p lockstep-query --test slt`;
//! `SLT_COMPLETE=1` rewrites the expected results of the selected files from the actual
//! ones (review the diff before keeping it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Float32Type, Float64Type};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use async_trait::async_trait;
use datafusion::error::DataFusionError;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use sqllogictest::{
    AsyncDB, DBOutput, DefaultColumnType, Runner, default_column_validator, default_normalizer, default_validator,
};

struct Lockstep {
    ctx: SessionContext,
}

fn column_type(dt: &DataType) -> DefaultColumnType {
    match dt {
        t if t.is_integer() => DefaultColumnType::Integer,
        t if t.is_floating() => DefaultColumnType::FloatingPoint,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DefaultColumnType::Text,
        _ => DefaultColumnType::Any,
    }
}

/// Shortest round-trip form, exponent for very large or small magnitudes, no `.0` on integers.
fn float(debug: String) -> String {
    debug.strip_suffix(".0").map(str::to_string).unwrap_or(debug)
}

fn cell(array: &ArrayRef, formatter: &ArrayFormatter, row: usize) -> String {
    if array.is_null(row) {
        return "NULL".to_string();
    }
    let text = match array.data_type() {
        DataType::Float64 => float(format!("{:?}", array.as_primitive::<Float64Type>().value(row))),
        DataType::Float32 => float(format!("{:?}", array.as_primitive::<Float32Type>().value(row))),
        _ => formatter.value(row).to_string(),
    };
    if text.is_empty() { "(empty)".to_string() } else { text }
}

#[async_trait]
impl AsyncDB for Lockstep {
    type Error = DataFusionError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DataFusionError> {
        let df = self.ctx.sql(sql).await?;
        let types: Vec<DefaultColumnType> = df.schema().fields().iter().map(|f| column_type(f.data_type())).collect();
        let batches = df.collect().await?;
        if types.is_empty() {
            return Ok(DBOutput::StatementComplete(0));
        }
        let options = FormatOptions::default().with_null("NULL");
        let mut rows = Vec::new();
        for batch in &batches {
            let formatters = batch
                .columns()
                .iter()
                .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
                .collect::<Result<Vec<_>, _>>()?;
            for row in 0..batch.num_rows() {
                rows.push(batch.columns().iter().zip(&formatters).map(|(c, f)| cell(c, f, row)).collect());
            }
        }
        Ok(DBOutput::Rows { types, rows })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "lockstep"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqllogictest_files() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/slt");
    let filter = std::env::var("SLT_FILTER").unwrap_or_default();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .filter(|p| p.to_string_lossy().contains(&filter))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .slt files in {}", dir.display());
    let complete = std::env::var("SLT_COMPLETE").is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    // Each file runs twice: on Lockstep's context (whole-series aggregates planned in one
    // phase) and on DataFusion's default plan (partial states built and merged).
    for (plan, lockstep_plan) in [("lockstep plan", true), ("datafusion plan", false)] {
        for file in &files {
            let mut runner = Runner::new(move || async move {
                let ctx = if lockstep_plan {
                    lockstep_query::plan::context(SessionConfig::new())
                } else {
                    // DataFusion's session, with the analyzer rule every Lockstep session has
                    // (PostgreSQL's array literals) and its functions.
                    let state = SessionStateBuilder::new()
                        .with_default_features()
                        .with_analyzer_rules(lockstep_query::pg_array::analyzer_rules())
                        .build();
                    let ctx = SessionContext::new_with_state(state);
                    lockstep_query::functions::register_all(&ctx);
                    ctx
                };
                Ok::<_, DataFusionError>(Lockstep { ctx })
            });
            if complete {
                if lockstep_plan {
                    runner
                        .update_test_file(file, " ", default_validator, default_normalizer, default_column_validator)
                        .await
                        .unwrap();
                }
                continue;
            }
            match runner.run_file_async(file).await {
                Ok(()) => println!("ok   {} ({plan})", file.display()),
                Err(e) => {
                    println!("FAIL {} ({plan})\n{}", file.display(), e.display(true));
                    failures.push(format!("{} ({plan})", file.display()));
                }
            }
        }
    }
    assert!(failures.is_empty(), "failed slt files: {failures:?}");
}
