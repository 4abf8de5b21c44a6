//! GROUP BY accumulator of `quantile_cont`: `(group, value)` pairs in two flat vectors,
//! counting-sorted by group when the groups are evaluated or emitted as state.
//!
//! Appending is a sequential write per row (no per-group vectors to grow); the counting sort
//! is one pass over the pairs and leaves every group's values contiguous, which is also the
//! exact layout of the `List<Float64>` state, so emitting state copies each value once.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Float64Array, ListArray};
use arrow::buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, Field, Float64Type};
use datafusion::common::Result;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};

use super::quantile_of;
use crate::functions::group_rows::{grow_groups, take_grouped};

/// Exact-quantile state of all groups.
#[derive(Debug)]
pub(super) struct QuantileGroups {
    q: f64,
    groups: Vec<u32>,
    values: Vec<f64>,
    num_groups: usize,
}

impl QuantileGroups {
    pub(super) fn new(q: f64) -> Self {
        Self { q, groups: Vec::new(), values: Vec::new(), num_groups: 0 }
    }

    /// Removes the groups selected by `emit_to` and returns their values grouped:
    /// `offsets[g]..offsets[g + 1]` are the values of emitted group `g`.
    fn take_grouped(&mut self, emit_to: EmitTo) -> Result<(Vec<i32>, Vec<f64>)> {
        take_grouped(&mut self.groups, &mut self.values, &mut self.num_groups, emit_to, "quantile_cont")
    }
}

impl GroupsAccumulator for QuantileGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.num_groups = grow_groups(self.num_groups, total_num_groups, "quantile_cont")?;
        let array = values[0].as_primitive::<Float64Type>();
        let data = array.values();
        self.groups.reserve(group_indices.len());
        self.values.reserve(group_indices.len());
        if array.null_count() == 0 && opt_filter.is_none() {
            self.groups.extend(group_indices.iter().map(|&g| g as u32));
            self.values.extend_from_slice(data);
        } else {
            for (i, &g) in group_indices.iter().enumerate() {
                let keep = array.is_valid(i) && opt_filter.is_none_or(|f| f.is_valid(i) && f.value(i));
                if keep {
                    self.groups.push(g as u32);
                    self.values.push(data[i]);
                }
            }
        }
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let (offsets, mut values) = self.take_grouped(emit_to)?;
        let mut out = Vec::with_capacity(offsets.len() - 1);
        for w in offsets.windows(2) {
            out.push(quantile_of(&mut values[w[0] as usize..w[1] as usize], self.q));
        }
        Ok(Arc::new(Float64Array::from(out)))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let (offsets, values) = self.take_grouped(emit_to)?;
        let list = ListArray::new(
            Arc::new(Field::new_list_field(DataType::Float64, true)),
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            Arc::new(Float64Array::from(values)),
            None,
        );
        Ok(vec![Arc::new(list)])
    }

    fn merge_batch(&mut self, values: &[ArrayRef], group_indices: &[usize], total_num_groups: usize) -> Result<()> {
        self.num_groups = grow_groups(self.num_groups, total_num_groups, "quantile_cont")?;
        let lists = values[0].as_list::<i32>();
        let items = lists.values().as_primitive::<Float64Type>();
        let offsets = lists.value_offsets();
        for (row, &g) in group_indices.iter().enumerate() {
            if lists.is_null(row) {
                continue;
            }
            for i in offsets[row] as usize..offsets[row + 1] as usize {
                if items.is_valid(i) {
                    self.groups.push(g as u32);
                    self.values.push(items.value(i));
                }
            }
        }
        Ok(())
    }

    fn convert_to_state(&self, values: &[ArrayRef], opt_filter: Option<&BooleanArray>) -> Result<Vec<ArrayRef>> {
        let array = values[0].as_primitive::<Float64Type>();
        let mut valid: Vec<bool> = (0..array.len()).map(|i| array.is_valid(i)).collect();
        if let Some(f) = opt_filter {
            for (i, v) in valid.iter_mut().enumerate() {
                *v = *v && f.is_valid(i) && f.value(i);
            }
        }
        let list = ListArray::new(
            Arc::new(Field::new_list_field(DataType::Float64, true)),
            OffsetBuffer::from_lengths(std::iter::repeat_n(1, array.len())),
            Arc::new(Float64Array::new(array.values().clone(), None)),
            Some(NullBuffer::from(valid)),
        );
        Ok(vec![Arc::new(list)])
    }

    fn size(&self) -> usize {
        self.groups.capacity() * 4 + self.values.capacity() * 8
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn batch(values: &[Option<f64>]) -> Vec<ArrayRef> {
        vec![Arc::new(Float64Array::from(values.to_vec()))]
    }

    #[test]
    fn emit_first_keeps_and_shifts_the_rest() {
        let mut acc = QuantileGroups::new(0.5);
        acc.update_batch(&batch(&[Some(1.0), Some(10.0), None, Some(3.0), Some(20.0)]), &[0, 1, 1, 0, 2], None, 3)
            .unwrap();
        let first = acc.evaluate(EmitTo::First(1)).unwrap();
        assert_eq!(first.as_primitive::<Float64Type>().values().to_vec(), vec![2.0]);
        acc.update_batch(&batch(&[Some(30.0)]), &[0], None, 2).unwrap();
        let rest = acc.evaluate(EmitTo::All).unwrap();
        assert_eq!(rest.as_primitive::<Float64Type>().values().to_vec(), vec![20.0, 20.0]);
    }

    #[test]
    fn state_then_merge_equals_direct() {
        let mut a = QuantileGroups::new(0.9);
        a.update_batch(&batch(&[Some(1.0), Some(2.0), Some(5.0)]), &[0, 1, 0], None, 2).unwrap();
        let state = a.state(EmitTo::All).unwrap();
        let mut b = QuantileGroups::new(0.9);
        b.update_batch(&batch(&[Some(4.0)]), &[1], None, 2).unwrap();
        b.merge_batch(&state, &[0, 1], 2).unwrap();
        let out = b.evaluate(EmitTo::All).unwrap();
        let out = out.as_primitive::<Float64Type>();
        assert_eq!(out.value(0), 1.0f64.mul_add(0.1f64, 5.0 * 0.9));
        assert_eq!(out.value(1), 2.0f64.mul_add(1.0 - 0.9f64, 4.0 * 0.9));
        assert!(b.evaluate(EmitTo::All).unwrap().is_empty());
    }

    #[test]
    fn empty_group_is_null() {
        let mut acc = QuantileGroups::new(0.5);
        acc.update_batch(&batch(&[None, Some(1.0)]), &[0, 1], None, 2).unwrap();
        let out = acc.evaluate(EmitTo::All).unwrap();
        assert!(out.is_null(0));
        assert!(out.is_valid(1));
    }
}
