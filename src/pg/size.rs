//! How large a row is as PostgreSQL text, before it is built: a list cell (`array_agg` over
//! millions of rows, `change_points`, `gap_fill`) is held by the statement's memory pool as
//! Arrow, but its text is built outside the pool, at about three times the bytes. A row whose
//! text would pass [`max_row_text`] (the statement's memory limit, at most 1 GiB) fails the
//! statement with SQLSTATE 54000 instead of growing the server by gigabytes (or past the
//! 2 GiB a wire message can say). The size is an upper estimate made from the Arrow arrays'
//! offsets (a number counts as the most characters its type can print).

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Schema};

/// 1 GiB, PostgreSQL's own limit on one field value.
const MAX_FIELD_BYTES: u64 = 1 << 30;

/// The most text a row may become: the statement's memory limit (`None`: unbounded), and at
/// most 1 GiB, PostgreSQL's own limit on one field value.
pub(super) fn max_row_text(memory_limit: Option<usize>) -> u64 {
    memory_limit.map_or(MAX_FIELD_BYTES, |m| (m as u64).min(MAX_FIELD_BYTES))
}

/// Whether rows of `schema` can be large beyond their batch's memory: a list, map or struct.
pub(super) fn may_be_large(schema: &Schema) -> bool {
    schema.fields().iter().any(|f| nested(f.data_type()))
}

fn nested(t: &DataType) -> bool {
    matches!(
        t,
        DataType::List(_)
            | DataType::LargeList(_)
            | DataType::ListView(_)
            | DataType::LargeListView(_)
            | DataType::FixedSizeList(..)
            | DataType::Map(..)
            | DataType::Struct(_)
            | DataType::Union(..)
    )
}

/// The first row of `batch` whose text would pass `max` bytes: its index, the column with
/// the most text and the row's estimated size.
pub(super) fn oversized_row(batch: &RecordBatch, max: u64) -> Option<(usize, String, u64)> {
    for row in 0..batch.num_rows() {
        let sizes = batch.columns().iter().map(|c| text_bytes(c.as_ref(), row, 1, 0));
        let (mut total, mut widest, mut widest_bytes) = (0u64, 0, 0);
        for (i, bytes) in sizes.enumerate() {
            total = total.saturating_add(bytes);
            if bytes > widest_bytes {
                (widest, widest_bytes) = (i, bytes);
            }
        }
        if total > max {
            return Some((row, batch.schema().field(widest).name().clone(), total));
        }
    }
    None
}

/// An upper estimate of the text of `len` values of `array` from `start` at nesting `depth`
/// (0: a column; each list or struct level quotes its elements again, which may double their
/// quotes and backslashes), without building it: lists and structs go down by their offsets,
/// so a row costs a few steps per nesting level, not one per element (but for string views).
fn text_bytes(array: &dyn Array, start: usize, len: usize, depth: u32) -> u64 {
    let n = len as u64;
    // Each level may escape every character of a string once more, and quote each element.
    let escaped = |bytes: u64| (bytes + 2 * n) << depth.min(16);
    let quoted = (2u64 << depth.min(16)) * n;
    let inner = depth + 1;
    match array.data_type() {
        DataType::Null => 4 * n,
        DataType::Boolean => 6 * n,
        DataType::Utf8 => escaped(span(array.as_string::<i32>().value_offsets(), start, len)) + n,
        DataType::LargeUtf8 => escaped(span(array.as_string::<i64>().value_offsets(), start, len)) + n,
        // Hex with its `\x` prefix.
        DataType::Binary => escaped(2 * span(array.as_binary::<i32>().value_offsets(), start, len) + 4 * n) + n,
        DataType::LargeBinary => escaped(2 * span(array.as_binary::<i64>().value_offsets(), start, len) + 4 * n) + n,
        DataType::Utf8View => {
            let v = array.as_string_view();
            escaped((start..start + len).map(|i| v.value(i).len() as u64).sum()) + n
        }
        DataType::BinaryView => {
            let v = array.as_binary_view();
            escaped((start..start + len).map(|i| 2 * v.value(i).len() as u64 + 4).sum()) + n
        }
        DataType::List(_) => {
            let list = array.as_list::<i32>();
            let offsets = list.value_offsets();
            let (from, to) = (offsets[start].max(0) as usize, offsets[start + len].max(0) as usize);
            text_bytes(list.values().as_ref(), from, to.saturating_sub(from), inner) + quoted + 2 * n
        }
        DataType::LargeList(_) => {
            let list = array.as_list::<i64>();
            let offsets = list.value_offsets();
            let (from, to) = (offsets[start].max(0) as usize, offsets[start + len].max(0) as usize);
            text_bytes(list.values().as_ref(), from, to.saturating_sub(from), inner) + quoted + 2 * n
        }
        DataType::FixedSizeList(_, size) => {
            let list = array.as_fixed_size_list();
            let size = (*size).max(0) as usize;
            let from = list.value_offset(start).max(0) as usize;
            text_bytes(list.values().as_ref(), from, len * size, inner) + quoted + 2 * n
        }
        DataType::Map(..) => {
            let map = array.as_map();
            let offsets = map.value_offsets();
            let (from, to) = (offsets[start].max(0) as usize, offsets[start + len].max(0) as usize);
            text_bytes(map.entries(), from, to.saturating_sub(from), inner) + quoted + 2 * n
        }
        DataType::Struct(_) => {
            let s = array.as_struct();
            let fields: u64 = s.columns().iter().map(|c| text_bytes(c.as_ref(), start, len, inner)).sum();
            fields + quoted + (2 + s.num_columns() as u64) * n
        }
        DataType::Dictionary(..) => (64 * n) << depth.min(16),
        // Sign and digits, plus a separator.
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => 21 * n,
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => 21 * n,
        // The shortest text that reads back (at most 24 characters: `-2.2250738585072014e-308`).
        DataType::Float16 | DataType::Float32 | DataType::Float64 => 25 * n,
        // Times, intervals, decimals: at most a few dozen characters each (quoted when nested).
        _ => (48 * n) << depth.min(16),
    }
}

/// The bytes between the offsets of values `start` and `start + len`.
fn span<O: Into<i64> + Copy>(offsets: &[O], start: usize, len: usize) -> u64 {
    let (from, to): (i64, i64) = (offsets[start].into(), offsets[start + len].into());
    to.saturating_sub(from).max(0) as u64
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{
        ArrayRef, FixedSizeListBuilder, Float64Builder, Int64Array, ListBuilder, StringArray, StringBuilder,
        StructArray,
    };
    use arrow::datatypes::{Field, Schema};
    use pgwire::api::portal::Format;

    use super::*;

    /// A batch of every shape `text_bytes` goes down: lists of floats and of strings, a struct
    /// of a list and an int, a fixed-size list; row 2 is long, the others short.
    fn batch() -> RecordBatch {
        let mut floats = ListBuilder::new(Float64Builder::new());
        let mut strings = ListBuilder::new(StringBuilder::new());
        let mut fixed = FixedSizeListBuilder::new(Float64Builder::new(), 3);
        for row in 0..4 {
            let n = if row == 2 { 5000 } else { row };
            for i in 0..n {
                floats.values().append_value(-1.0e-300 / (i as f64 + 3.0));
                strings.values().append_value(format!("label \"{i}\" with, a comma"));
            }
            floats.append(row != 1);
            strings.append(true);
            for i in 0..3 {
                fixed.values().append_value(f64::MIN_POSITIVE * (i + row) as f64);
            }
            fixed.append(true);
        }
        let floats: ArrayRef = Arc::new(floats.finish());
        let inner: ArrayRef = Arc::new(Int64Array::from(vec![i64::MIN, 0, 7, i64::MAX]));
        let record = StructArray::from(vec![
            (Arc::new(Field::new("xs", floats.data_type().clone(), true)), floats.clone()),
            (Arc::new(Field::new("n", inner.data_type().clone(), false)), inner),
        ]);
        let names: ArrayRef = Arc::new(StringArray::from(vec!["a", "bb", "ccc", "dddd"]));
        let columns: Vec<ArrayRef> =
            vec![floats, Arc::new(strings.finish()), Arc::new(record), Arc::new(fixed.finish()), names];
        let fields: Vec<Field> = ["floats", "strings", "record", "fixed", "name"]
            .iter()
            .zip(&columns)
            .map(|(name, c)| Field::new(*name, c.data_type().clone(), true))
            .collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    /// The estimate is at least the text arrow-pg sends for every row (and not wildly more),
    /// also for a slice of the batch; the long row is the one refused under a small limit.
    #[test]
    fn the_estimate_bounds_the_text_sent() {
        let batch = batch();
        assert!(may_be_large(&batch.schema()));
        assert!(!may_be_large(&Schema::new(vec![Field::new("v", DataType::Float64, true)])));
        for batch in [batch.clone(), batch.slice(1, 3)] {
            let fields = Arc::new(
                arrow_pg::datatypes::arrow_schema_to_pg_fields(&batch.schema(), &Format::UnifiedText, None).unwrap(),
            );
            let sent: Vec<u64> = arrow_pg::datatypes::encode_recordbatch(fields, batch.clone())
                .map(|row| row.unwrap().data.len() as u64)
                .collect();
            for (row, &sent) in sent.iter().enumerate() {
                let estimate: u64 = batch.columns().iter().map(|c| text_bytes(c.as_ref(), row, 1, 0)).sum();
                assert!(estimate >= sent && estimate <= 4 * sent + 400, "row {row}: estimate {estimate}, sent {sent}");
            }
            let long = if batch.num_rows() == 4 { 2 } else { 1 };
            let (row, column, bytes) = oversized_row(&batch, 100_000).unwrap();
            assert_eq!((row, column.as_str()), (long, "strings"), "{bytes}");
            assert_eq!(oversized_row(&batch, bytes), None);
        }
        assert_eq!(max_row_text(None), 1 << 30);
        assert_eq!(max_row_text(Some(64 << 20)), 64 << 20);
        assert_eq!(max_row_text(Some(usize::MAX)), 1 << 30);
    }
}
