//! GROUP BY accumulator over the point state: `(group, time, v₁ .. v_K)` rows in flat vectors
//! for all groups at once, evaluated per group by a function of the group's points.
//!
//! The per-group [`Accumulator`](datafusion::logical_expr::Accumulator) path costs DataFusion's
//! adapter a `take` of every batch per group and the partial state a copy per group plus a
//! concatenation; here a batch is appended with `extend_from_slice`, a partial state is emitted
//! as one `List` per column that reuses the flat vectors, and a merge appends each state row's
//! values in one slice copy. Rows are regrouped at emission by a counting sort on the group
//! index, skipped when the rows are already in group order (the usual case: group indices are
//! assigned in order of first appearance, and rows of one series arrive together).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int64Array, ListArray};
use arrow::buffer::{OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, Field, Float64Type, Int64Type};
use datafusion::common::{Result, ScalarValue, internal_err};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};

use super::{arrays, keep};
use crate::functions::group_rows::{RowColumns, grow_groups, take_grouped};

/// Evaluates one group from its points: times (ns) and the `K` value columns, in arrival order.
pub(crate) type EvalFn<const K: usize> = Box<dyn Fn(&[i64], [&[f64]; K]) -> Result<ScalarValue> + Send>;

/// Point state of all groups.
pub(crate) struct PointGroups<const K: usize> {
    groups: Vec<u32>,
    points: Points<K>,
    num_groups: usize,
    eval: EvalFn<K>,
    name: &'static str,
}

impl<const K: usize> std::fmt::Debug for PointGroups<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PointGroups")
            .field("name", &self.name)
            .field("rows", &self.groups.len())
            .field("num_groups", &self.num_groups)
            .finish()
    }
}

/// The points of the rows: times and `K` value columns.
struct Points<const K: usize> {
    times: Vec<i64>,
    cols: [Vec<f64>; K],
}

impl<const K: usize> RowColumns for Points<K> {
    fn zeroed(n: usize) -> Self {
        Points { times: vec![0; n], cols: std::array::from_fn(|_| vec![0.0; n]) }
    }
    fn split_off(&mut self, at: usize) -> Self {
        Points { times: self.times.split_off(at), cols: std::array::from_fn(|i| self.cols[i].split_off(at)) }
    }
    fn copy_row(&self, from: usize, dst: &mut Self, to: usize) {
        dst.times[to] = self.times[from];
        for (d, s) in dst.cols.iter_mut().zip(&self.cols) {
            d[to] = s[from];
        }
    }
    fn move_row(&mut self, from: usize, to: usize) {
        self.times[to] = self.times[from];
        for c in &mut self.cols {
            c[to] = c[from];
        }
    }
    fn truncate(&mut self, n: usize) {
        self.times.truncate(n);
        for c in &mut self.cols {
            c.truncate(n);
        }
    }
}

/// The emitted groups' points, grouped: rows `offsets[g]..offsets[g + 1]` belong to group `g`.
struct Grouped<const K: usize> {
    offsets: Vec<i32>,
    times: Vec<i64>,
    cols: [Vec<f64>; K],
}

impl<const K: usize> PointGroups<K> {
    pub(crate) fn new(name: &'static str, eval: EvalFn<K>) -> Self {
        Self {
            groups: Vec::new(),
            points: Points { times: Vec::new(), cols: std::array::from_fn(|_| Vec::new()) },
            num_groups: 0,
            eval,
            name,
        }
    }

    /// Removes the groups selected by `emit_to` and returns their rows grouped.
    fn take_grouped(&mut self, emit_to: EmitTo) -> Result<Grouped<K>> {
        let (offsets, Points { times, cols }) =
            take_grouped(&mut self.groups, &mut self.points, &mut self.num_groups, emit_to, self.name)?;
        Ok(Grouped { offsets, times, cols })
    }

    fn push_rows(&mut self, g: u32, times: &[i64], cols: [&[f64]; K]) {
        self.groups.extend(std::iter::repeat_n(g, times.len()));
        self.points.times.extend_from_slice(times);
        for (dst, src) in self.points.cols.iter_mut().zip(cols) {
            dst.extend_from_slice(src);
        }
    }
}

impl<const K: usize> GroupsAccumulator for PointGroups<K> {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.num_groups = grow_groups(self.num_groups, total_num_groups, self.name)?;
        let (times, cols) = arrays::<K>(values)?;
        let clean = opt_filter.is_none() && times.null_count() == 0 && cols.iter().all(|c| c.null_count() == 0);
        if clean {
            // Runs of one group (rows of one series arrive together) are appended as slices.
            let mut start = 0;
            while start < group_indices.len() {
                let g = group_indices[start];
                let mut end = start + 1;
                while end < group_indices.len() && group_indices[end] == g {
                    end += 1;
                }
                let slices: [&[f64]; K] = std::array::from_fn(|i| &cols[i].values()[start..end]);
                self.push_rows(g as u32, &times.values()[start..end], slices);
                start = end;
            }
            return Ok(());
        }
        for (row, &g) in group_indices.iter().enumerate() {
            let selected = opt_filter.is_none_or(|f| f.is_valid(row) && f.value(row));
            if selected && keep(times, &cols, row) {
                self.groups.push(g as u32);
                self.points.times.push(times.value(row));
                for (dst, src) in self.points.cols.iter_mut().zip(&cols) {
                    dst.push(src.value(row));
                }
            }
        }
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let grouped = self.take_grouped(emit_to)?;
        let mut out = Vec::with_capacity(grouped.offsets.len() - 1);
        for w in grouped.offsets.windows(2) {
            let (a, b) = (w[0] as usize, w[1] as usize);
            let cols: [&[f64]; K] = std::array::from_fn(|i| &grouped.cols[i][a..b]);
            out.push((self.eval)(&grouped.times[a..b], cols)?);
        }
        if out.is_empty() {
            return internal_err!("{}: evaluate with no groups", self.name);
        }
        ScalarValue::iter_to_array(out)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let Grouped { offsets, times, cols } = self.take_grouped(emit_to)?;
        let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
        let list = |values: ArrayRef, item: DataType| -> ArrayRef {
            Arc::new(ListArray::new(Arc::new(Field::new_list_field(item, true)), offsets.clone(), values, None))
        };
        let mut out = Vec::with_capacity(K + 1);
        out.push(list(Arc::new(Int64Array::from(times)), DataType::Int64));
        for c in cols {
            out.push(list(Arc::new(Float64Array::from(c)), DataType::Float64));
        }
        Ok(out)
    }

    fn merge_batch(&mut self, values: &[ArrayRef], group_indices: &[usize], total_num_groups: usize) -> Result<()> {
        self.num_groups = grow_groups(self.num_groups, total_num_groups, self.name)?;
        if values.len() < K + 1 {
            return internal_err!("point state has {} columns, expected {}", values.len(), K + 1);
        }
        let times = values[0].as_list::<i32>();
        let offsets = times.value_offsets();
        let time_items = times.values().as_primitive::<Int64Type>();
        let mut col_items = Vec::with_capacity(K);
        for v in &values[1..=K] {
            let l = v.as_list::<i32>();
            if l.value_offsets() != offsets {
                return internal_err!("point state columns differ in length");
            }
            col_items.push(l.values().as_primitive::<Float64Type>());
        }
        if time_items.null_count() > 0 || col_items.iter().any(|c| c.null_count() > 0) {
            return internal_err!("point state has NULL items");
        }
        for (row, &g) in group_indices.iter().enumerate() {
            if times.is_null(row) {
                continue;
            }
            let (a, b) = (offsets[row] as usize, offsets[row + 1] as usize);
            let cols: [&[f64]; K] = std::array::from_fn(|i| &col_items[i].values()[a..b]);
            self.push_rows(g as u32, &time_items.values()[a..b], cols);
        }
        Ok(())
    }

    /// Each input row becomes a one-point state (no points when filtered out or NULL).
    fn convert_to_state(&self, values: &[ArrayRef], opt_filter: Option<&BooleanArray>) -> Result<Vec<ArrayRef>> {
        let (times, cols) = arrays::<K>(values)?;
        let kept: Vec<bool> = (0..times.len())
            .map(|row| opt_filter.is_none_or(|f| f.is_valid(row) && f.value(row)) && keep(times, &cols, row))
            .collect();
        let offsets = OffsetBuffer::from_lengths(kept.iter().map(|&k| usize::from(k)));
        let rows = kept.iter().enumerate().filter(|(_, k)| **k).map(|(i, _)| i);
        let list = |values: ArrayRef, item: DataType| -> ArrayRef {
            Arc::new(ListArray::new(Arc::new(Field::new_list_field(item, true)), offsets.clone(), values, None))
        };
        let mut out = Vec::with_capacity(K + 1);
        out.push(list(Arc::new(Int64Array::from_iter_values(rows.clone().map(|i| times.value(i)))), DataType::Int64));
        for c in &cols {
            out.push(list(
                Arc::new(Float64Array::from_iter_values(rows.clone().map(|i| c.value(i)))),
                DataType::Float64,
            ));
        }
        Ok(out)
    }

    fn size(&self) -> usize {
        self.groups.capacity() * 4
            + self.points.times.capacity() * 8
            + self.points.cols.iter().map(|c| c.capacity() * 8).sum::<usize>()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use arrow::array::TimestampNanosecondArray;

    /// Evaluates to `sum(time · v)` over the group, order-independent, NULL when empty.
    fn weighted(times: &[i64], cols: [&[f64]; 1]) -> Result<ScalarValue> {
        if times.is_empty() {
            return Ok(ScalarValue::Float64(None));
        }
        Ok(ScalarValue::Float64(Some(times.iter().zip(cols[0]).map(|(t, v)| *t as f64 * v).sum())))
    }

    fn batch(t: &[Option<i64>], v: &[Option<f64>]) -> Vec<ArrayRef> {
        vec![Arc::new(TimestampNanosecondArray::from(t.to_vec())), Arc::new(Float64Array::from(v.to_vec()))]
    }

    fn values(a: &ArrayRef) -> Vec<Option<f64>> {
        a.as_primitive::<Float64Type>().iter().collect()
    }

    #[test]
    fn grouped_and_interleaved_rows_state_merge_and_emit_first() {
        // Interleaved groups with a NULL row, then a filter.
        let mut a = PointGroups::<1>::new("t", Box::new(weighted));
        a.update_batch(
            &batch(&[Some(1), Some(2), None, Some(4), Some(5)], &[Some(1.0), Some(10.0), Some(7.0), Some(2.0), None]),
            &[0, 1, 1, 0, 2],
            None,
            3,
        )
        .unwrap();
        let filter = BooleanArray::from(vec![true, false]);
        a.update_batch(&batch(&[Some(3), Some(9)], &[Some(3.0), Some(9.0)]), &[2, 2], Some(&filter), 3).unwrap();
        let state = a.state(EmitTo::All).unwrap();
        assert_eq!(a.groups.len(), 0);

        // Sorted (grouped) rows take the prefix path, then the interleaved state merges in.
        let mut b = PointGroups::<1>::new("t", Box::new(weighted));
        b.update_batch(&batch(&[Some(10), Some(20)], &[Some(1.0), Some(1.0)]), &[0, 1], None, 2).unwrap();
        b.merge_batch(&state, &[1, 0, 2], 3).unwrap();
        let first = b.evaluate(EmitTo::First(1)).unwrap();
        // group 0: 10·1 + (group 1 of a) 2·10 = 30
        assert_eq!(values(&first), vec![Some(30.0)]);
        let rest = b.evaluate(EmitTo::All).unwrap();
        // old group 1: 20·1 + (group 0 of a) 1·1 + 4·2 = 29; old group 2: 3·3 = 9
        assert_eq!(values(&rest), vec![Some(29.0), Some(9.0)]);
    }

    #[test]
    fn empty_group_evaluates_on_no_points() {
        let mut a = PointGroups::<1>::new("t", Box::new(weighted));
        a.update_batch(&batch(&[None, Some(2)], &[Some(1.0), Some(3.0)]), &[0, 1], None, 2).unwrap();
        assert_eq!(values(&a.evaluate(EmitTo::All).unwrap()), vec![None, Some(6.0)]);
    }
}
