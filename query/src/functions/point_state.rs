//! The mergeable state shared by `lag_corr`, `onset` and `change_points`: the raw points.
//!
//! These analyses need the whole series in time order, and partial states merge in any
//! order, so the state is the list of `(time, v₁ .. v_K)` points, kept unsorted and handed to
//! the engine (which sorts) at evaluation. Rows with a NULL time or a NULL value are dropped
//! on arrival (NaN and ±inf are kept; each function documents what it does with them).
//! Sliding window frames retract rows from the front in arrival order.

mod groups;

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int64Array, ListArray};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Float64Type, Int64Type, TimestampNanosecondType};
use datafusion::common::{Result, ScalarValue, internal_err};
use datafusion::logical_expr::function::StateFieldsArgs;
use datafusion::logical_expr::utils::format_state_name;

pub(crate) use groups::PointGroups;

/// Points of one group: times (ns) and `K` value columns, with a retraction offset.
#[derive(Debug, Clone)]
pub(crate) struct Points<const K: usize> {
    times: Vec<i64>,
    cols: [Vec<f64>; K],
    /// Rows before `head` were retracted by a sliding window frame.
    head: usize,
}

impl<const K: usize> Default for Points<K> {
    fn default() -> Self {
        Self { times: Vec::new(), cols: std::array::from_fn(|_| Vec::new()), head: 0 }
    }
}

impl<const K: usize> Points<K> {
    /// Live times (ns).
    pub(crate) fn times(&self) -> &[i64] {
        &self.times[self.head..]
    }

    /// Live values of column `i`.
    pub(crate) fn col(&self, i: usize) -> &[f64] {
        &self.cols[i][self.head..]
    }

    /// Appends the rows of `values` = `[time, v₁ .. v_K, ..]` that have no NULL.
    pub(crate) fn update(&mut self, values: &[ArrayRef]) -> Result<()> {
        let (times, cols) = arrays::<K>(values)?;
        self.times.reserve(times.len());
        for c in &mut self.cols {
            c.reserve(times.len());
        }
        for row in 0..times.len() {
            if keep(times, &cols, row) {
                self.times.push(times.value(row));
                for (dst, src) in self.cols.iter_mut().zip(&cols) {
                    dst.push(src.value(row));
                }
            }
        }
        Ok(())
    }

    /// Drops from the front as many points as `values` has rows without NULL (window frames
    /// retract rows in the order they were added).
    pub(crate) fn retract(&mut self, values: &[ArrayRef]) -> Result<()> {
        let (times, cols) = arrays::<K>(values)?;
        let gone = (0..times.len()).filter(|&row| keep(times, &cols, row)).count();
        self.head = (self.head + gone).min(self.times.len());
        if self.head > 4096 && self.head * 2 > self.times.len() {
            self.times.drain(..self.head);
            for c in &mut self.cols {
                c.drain(..self.head);
            }
            self.head = 0;
        }
        Ok(())
    }

    /// The state: one list per column (times first).
    pub(crate) fn state(&self) -> Vec<ScalarValue> {
        let mut out = Vec::with_capacity(K + 1);
        out.push(list(Arc::new(Int64Array::from(self.times().to_vec())), DataType::Int64));
        for i in 0..K {
            out.push(list(Arc::new(Float64Array::from(self.col(i).to_vec())), DataType::Float64));
        }
        out
    }

    /// Appends the points of partial states produced by [`Points::state`].
    pub(crate) fn merge(&mut self, states: &[ArrayRef]) -> Result<()> {
        if states.len() < K + 1 {
            return internal_err!("point state has {} columns, expected {}", states.len(), K + 1);
        }
        let times = states[0].as_list::<i32>();
        for row in 0..times.len() {
            if times.is_null(row) {
                continue;
            }
            let t = times.value(row);
            let t = t.as_primitive::<Int64Type>();
            let before = self.times.len();
            self.times.extend_from_slice(t.values());
            for i in 0..K {
                let c = states[i + 1].as_list::<i32>().value(row);
                let c = c.as_primitive::<Float64Type>();
                if c.len() != t.len() {
                    self.times.truncate(before);
                    return internal_err!("point state columns differ in length");
                }
                self.cols[i].extend_from_slice(c.values());
            }
        }
        Ok(())
    }

    /// Approximate memory use in bytes.
    pub(crate) fn size(&self) -> usize {
        size_of::<Self>()
            + self.times.capacity() * size_of::<i64>()
            + self.cols.iter().map(|c| c.capacity() * size_of::<f64>()).sum::<usize>()
    }
}

/// State fields: `times` then one float list per value column name.
pub(crate) fn state_fields(args: &StateFieldsArgs, columns: &[&str]) -> Vec<FieldRef> {
    let list = |t: DataType| DataType::List(Arc::new(Field::new_list_field(t, true)));
    let mut out = vec![Arc::new(Field::new(format_state_name(args.name, "times"), list(DataType::Int64), true))];
    for c in columns {
        out.push(Arc::new(Field::new(format_state_name(args.name, c), list(DataType::Float64), true)));
    }
    out
}

fn list(values: ArrayRef, item: DataType) -> ScalarValue {
    let field = Arc::new(Field::new_list_field(item, true));
    let offsets = OffsetBuffer::from_lengths([values.len()]);
    ScalarValue::List(Arc::new(ListArray::new(field, offsets, values, None)))
}

type Columns<'a, const K: usize> = (&'a arrow::array::PrimitiveArray<TimestampNanosecondType>, [&'a Float64Array; K]);

fn arrays<const K: usize>(values: &[ArrayRef]) -> Result<Columns<'_, K>> {
    if values.len() < K + 1 {
        return internal_err!("expected {} argument arrays, got {}", K + 1, values.len());
    }
    let Some(times) = values[0].as_primitive_opt::<TimestampNanosecondType>() else {
        return internal_err!("time argument is {}, expected Timestamp(ns)", values[0].data_type());
    };
    let mut cols = Vec::with_capacity(K);
    for v in &values[1..=K] {
        let Some(c) = v.as_primitive_opt::<Float64Type>() else {
            return internal_err!("value argument is {}, expected Float64", v.data_type());
        };
        cols.push(c);
    }
    match cols.try_into() {
        Ok(cols) => Ok((times, cols)),
        Err(_) => internal_err!("wrong number of value columns"),
    }
}

fn keep<const K: usize>(
    times: &arrow::array::PrimitiveArray<TimestampNanosecondType>,
    cols: &[&Float64Array; K],
    row: usize,
) -> bool {
    times.is_valid(row) && cols.iter().all(|c| c.is_valid(row))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use arrow::array::TimestampNanosecondArray;

    fn batch(t: &[Option<i64>], v: &[Option<f64>]) -> Vec<ArrayRef> {
        vec![Arc::new(TimestampNanosecondArray::from(t.to_vec())), Arc::new(Float64Array::from(v.to_vec()))]
    }

    #[test]
    fn nulls_dropped_state_round_trips_and_retract_pops_front() {
        let mut p = Points::<1>::default();
        p.update(&batch(&[Some(3), None, Some(1), Some(2)], &[Some(0.3), Some(9.0), None, Some(f64::NAN)])).unwrap();
        assert_eq!(p.times(), &[3, 2]);
        let state: Vec<ArrayRef> = p.state().iter().map(|s| s.to_array().unwrap()).collect();
        let mut q = Points::<1>::default();
        q.merge(&state).unwrap();
        q.merge(&state).unwrap();
        assert_eq!(q.times(), &[3, 2, 3, 2]);
        assert!(q.col(0)[3].is_nan());
        q.retract(&batch(&[Some(3), None], &[Some(0.3), Some(1.0)])).unwrap();
        assert_eq!(q.times(), &[2, 3, 2]);
        assert_eq!(q.times().len(), 3);
    }
}
