//! The client side of `lockstep sql --server postgres://…`: runs statements on a running
//! server's PostgreSQL listener and turns the rows back into Arrow batches for the printers.
//!
//! Columns of the types Lockstep sends (booleans, integers, floats, text, timestamps) keep
//! their type; a result with any other type is fetched as text. `timestamptz` values are
//! shown as UTC timestamps with microsecond precision (the protocol's resolution).

use std::sync::Arc;

use anyhow::Context;
use arrow::array::{
    Array, ArrayRef, BooleanArray, BooleanBuilder, Float32Array, Float32Builder, Float64Array, Float64Builder,
    Int16Array, Int16Builder, Int32Array, Int32Builder, Int64Array, Int64Builder, RecordBatch, StringArray,
    StringBuilder, TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use futures::StreamExt;
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::{Client, NoTls, Row, SimpleQueryMessage};

/// Rows per batch handed to the printer.
const BATCH_ROWS: usize = 4096;
/// Microseconds from 1970-01-01 to 2000-01-01 (the Postgres epoch).
const PG_EPOCH_US: i64 = 946_684_800_000_000;

/// A connection to a Lockstep (or any PostgreSQL) server.
pub struct Remote {
    client: Client,
    connection: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote").finish_non_exhaustive()
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

/// A timestamp (with or without zone) as microseconds since 1970 in UTC.
struct Micros(i64);

impl<'a> FromSql<'a> for Micros {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let bytes: [u8; 8] = raw.try_into()?;
        Ok(Micros(i64::from_be_bytes(bytes).saturating_add(PG_EPOCH_US)))
    }

    fn accepts(ty: &Type) -> bool {
        matches!(*ty, Type::TIMESTAMP | Type::TIMESTAMPTZ)
    }
}

/// The error's text once: the server's message (and detail) for a database error.
pub fn error_text(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{} ({detail})", db.message()),
            None => db.message().to_string(),
        },
        // The server asked for a password the URL did not give: the driver's own text is
        // only "invalid configuration" (its cause, "password missing", is not displayed).
        None if std::error::Error::source(e).is_some_and(|s| s.to_string().contains("password missing")) => {
            "the server asks for a password: give a token with the read role in the URL \
             (postgresql://user:TOKEN@host:port)"
                .to_string()
        }
        None => e.to_string(),
    }
}

impl Remote {
    /// Connects to `url` (`postgres://[user[:password]@]host[:port][/db]`; the password is a
    /// token when the server has a tokens file). TLS is not supported by this client.
    pub async fn connect(url: &str) -> anyhow::Result<Remote> {
        let (client, connection) = tokio_postgres::connect(url, NoTls)
            .await
            .map_err(|e| anyhow::anyhow!("{}", error_text(&e)))
            .with_context(|| format!("connecting to {}", redact(url)))?;
        let connection = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "server connection ended");
            }
        });
        Ok(Remote { client, connection })
    }

    /// Runs one statement, handing its rows to `sink` batch by batch. Statements without rows
    /// (`SET`, `BEGIN`) hand nothing.
    pub async fn run(
        &self,
        sql: &str,
        mut sink: impl FnMut(RecordBatch) -> anyhow::Result<bool>,
    ) -> anyhow::Result<()> {
        let fail = |e: tokio_postgres::Error| anyhow::anyhow!("{}", error_text(&e));
        let statement = self.client.prepare(sql).await.map_err(fail)?;
        let columns = statement.columns();
        if columns.is_empty() {
            self.client.execute(&statement, &[]).await.map_err(fail)?;
            return Ok(());
        }
        let types: Option<Vec<DataType>> = columns.iter().map(|c| arrow_type(c.type_())).collect();
        let Some(types) = types else {
            let types = columns.iter().map(|c| arrow_type(c.type_())).collect();
            return self.run_as_text(sql, types, sink).await;
        };
        let schema: SchemaRef = Arc::new(Schema::new(
            columns.iter().zip(&types).map(|(c, t)| Field::new(c.name(), t.clone(), true)).collect::<Vec<_>>(),
        ));
        let rows = self
            .client
            .query_raw(&statement, std::iter::empty::<&dyn tokio_postgres::types::ToSql>())
            .await
            .map_err(fail)?;
        let mut rows = std::pin::pin!(rows);
        let mut pending: Vec<Row> = Vec::with_capacity(BATCH_ROWS);
        let mut sent_any = false;
        loop {
            let next = rows.next().await.transpose().map_err(fail)?;
            let done = next.is_none();
            pending.extend(next);
            if pending.len() == BATCH_ROWS || (done && (!pending.is_empty() || !sent_any)) {
                sent_any = true;
                if !sink(to_batch(&schema, &pending)?)? {
                    return Ok(());
                }
                pending.clear();
            }
            if done {
                return Ok(());
            }
        }
    }

    /// Runs `sql` with the simple protocol, every column as text; those of `types` (the Arrow
    /// type of each column read as itself) are then parsed back, so that a number stays a
    /// number in `--format json` beside a column of another type (QA pass 23b M4).
    async fn run_as_text(
        &self,
        sql: &str,
        types: Vec<Option<DataType>>,
        mut sink: impl FnMut(RecordBatch) -> anyhow::Result<bool>,
    ) -> anyhow::Result<()> {
        let messages = self.client.simple_query(sql).await.map_err(|e| anyhow::anyhow!("{}", error_text(&e)))?;
        let mut schema: Option<SchemaRef> = None;
        let mut columns: Vec<StringBuilder> = Vec::new();
        for message in messages {
            match message {
                SimpleQueryMessage::RowDescription(description) => {
                    let fields: Vec<Field> =
                        description.iter().map(|c| Field::new(c.name(), DataType::Utf8, true)).collect();
                    columns = fields.iter().map(|_| StringBuilder::new()).collect();
                    schema = Some(Arc::new(Schema::new(fields)));
                }
                SimpleQueryMessage::Row(row) => {
                    for (i, column) in columns.iter_mut().enumerate() {
                        column.append_option(row.get(i));
                    }
                }
                _ => {}
            }
        }
        if let Some(schema) = schema {
            let mut fields = Vec::new();
            let mut arrays = Vec::new();
            for (i, (field, column)) in schema.fields().iter().zip(columns.iter_mut()).enumerate() {
                let text = column.finish();
                let typed = types.get(i).cloned().flatten().and_then(|t| from_text(&text, &t));
                let array = typed.unwrap_or_else(|| Arc::new(text) as ArrayRef);
                fields.push(Field::new(field.name(), array.data_type().clone(), true));
                arrays.push(array);
            }
            sink(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)?;
        }
        Ok(())
    }
}

/// `url` without its password.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let user_info = &url[scheme + 3..at];
            match user_info.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// The Arrow type a column of `ty` is read as, or `None` for types read as text.
fn arrow_type(ty: &Type) -> Option<DataType> {
    Some(match *ty {
        Type::BOOL => DataType::Boolean,
        Type::INT2 => DataType::Int16,
        Type::INT4 => DataType::Int32,
        Type::INT8 => DataType::Int64,
        Type::FLOAT4 => DataType::Float32,
        Type::FLOAT8 => DataType::Float64,
        Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR => DataType::Utf8,
        Type::TIMESTAMP | Type::TIMESTAMPTZ => DataType::Timestamp(TimeUnit::Microsecond, None),
        _ => return None,
    })
}

/// `text` (PostgreSQL's text format of a column) as `data_type`, or `None` when a value does
/// not parse (the column then stays text).
fn from_text(text: &StringArray, data_type: &DataType) -> Option<ArrayRef> {
    fn parsed<T: std::str::FromStr>(text: &StringArray) -> Option<Vec<Option<T>>> {
        text.iter().map(|v| v.map_or(Some(None), |v| v.parse().ok().map(Some))).collect()
    }
    Some(match data_type {
        DataType::Boolean => Arc::new(BooleanArray::from(
            text.iter()
                .map(|v| match v {
                    None => Some(None),
                    Some("t") => Some(Some(true)),
                    Some("f") => Some(Some(false)),
                    Some(_) => None,
                })
                .collect::<Option<Vec<_>>>()?,
        )),
        DataType::Int16 => Arc::new(Int16Array::from(parsed::<i16>(text)?)),
        DataType::Int32 => Arc::new(Int32Array::from(parsed::<i32>(text)?)),
        DataType::Int64 => Arc::new(Int64Array::from(parsed::<i64>(text)?)),
        // Rust reads PostgreSQL's `Infinity`, `-Infinity` and `NaN`.
        DataType::Float32 => Arc::new(Float32Array::from(parsed::<f32>(text)?)),
        DataType::Float64 => Arc::new(Float64Array::from(parsed::<f64>(text)?)),
        DataType::Utf8 => Arc::new(text.clone()),
        DataType::Timestamp(..) => {
            // `2026-03-02 09:00:00.123456+00`: the zone as `+00:00`, which Arrow reads.
            let zoned: StringArray = text
                .iter()
                .map(|v| {
                    v.map(|v| match v.len().checked_sub(3).and_then(|at| v.get(at..).map(|zone| (at, zone))) {
                        Some((_, zone))
                            if (zone.starts_with('+') || zone.starts_with('-'))
                                && zone[1..].bytes().all(|b| b.is_ascii_digit()) =>
                        {
                            format!("{v}:00")
                        }
                        _ => v.to_string(),
                    })
                })
                .collect();
            let options = arrow::compute::CastOptions { safe: false, ..Default::default() };
            arrow::compute::cast_with_options(&zoned, &DataType::Timestamp(TimeUnit::Microsecond, None), &options)
                .ok()?
        }
        _ => return None,
    })
}

fn to_batch(schema: &SchemaRef, rows: &[Row]) -> anyhow::Result<RecordBatch> {
    let column = |i: usize, data_type: &DataType| -> Result<ArrayRef, tokio_postgres::Error> {
        macro_rules! build {
            ($builder:ty, $rust:ty) => {{
                let mut b = <$builder>::with_capacity(rows.len());
                for row in rows {
                    b.append_option(row.try_get::<_, Option<$rust>>(i)?);
                }
                Arc::new(b.finish()) as ArrayRef
            }};
        }
        Ok(match data_type {
            DataType::Boolean => build!(BooleanBuilder, bool),
            DataType::Int16 => build!(Int16Builder, i16),
            DataType::Int32 => build!(Int32Builder, i32),
            DataType::Int64 => build!(Int64Builder, i64),
            DataType::Float32 => build!(Float32Builder, f32),
            DataType::Float64 => build!(Float64Builder, f64),
            DataType::Timestamp(..) => {
                let mut b = TimestampMicrosecondBuilder::with_capacity(rows.len());
                for row in rows {
                    b.append_option(row.try_get::<_, Option<Micros>>(i)?.map(|m| m.0));
                }
                Arc::new(b.finish()) as ArrayRef
            }
            _ => {
                let mut b = StringBuilder::new();
                for row in rows {
                    b.append_option(row.try_get::<_, Option<&str>>(i)?);
                }
                Arc::new(b.finish()) as ArrayRef
            }
        })
    };
    let arrays = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| column(i, f.data_type()).map_err(|e| anyhow::anyhow!("{}", error_text(&e))))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(schema.clone(), arrays)?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn text_columns_are_read_back_as_their_types() {
        let text = |v: &[Option<&str>]| StringArray::from(v.to_vec());
        let floats =
            from_text(&text(&[Some("2.5"), Some("-Infinity"), Some("NaN"), None]), &DataType::Float64).unwrap();
        let floats = floats.as_any().downcast_ref::<Float64Array>().unwrap();
        assert_eq!((floats.value(0), floats.value(1), floats.is_null(3)), (2.5, f64::NEG_INFINITY, true));
        assert!(floats.value(2).is_nan());
        let flags = from_text(&text(&[Some("t"), Some("f")]), &DataType::Boolean).unwrap();
        assert_eq!(flags.as_any().downcast_ref::<BooleanArray>().unwrap(), &BooleanArray::from(vec![true, false]));
        let micros = DataType::Timestamp(TimeUnit::Microsecond, None);
        let times = from_text(&text(&[Some("2026-03-02 09:00:00.123456+00"), Some("1970-01-01 00:00:01-01")]), &micros);
        let times = arrow::compute::cast(&times.unwrap(), &DataType::Int64).unwrap();
        let times = times.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!((times.value(0), times.value(1)), (1_772_442_000_123_456, 3_601_000_000));
        // A value that does not parse leaves the column as text.
        assert!(from_text(&text(&[Some("12"), Some("x")]), &DataType::Int64).is_none());
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact("postgres://h:5432"), "postgres://h:5432");
        assert_eq!(redact("postgres://u@h"), "postgres://u@h");
    }

    #[test]
    fn timestamps_are_microseconds_since_1970() {
        let raw = 0i64.to_be_bytes();
        assert_eq!(Micros::from_sql(&Type::TIMESTAMPTZ, &raw).unwrap().0, PG_EPOCH_US);
        assert!(arrow_type(&Type::NUMERIC).is_none());
    }
}
