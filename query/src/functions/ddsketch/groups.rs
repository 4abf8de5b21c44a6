//! GROUP BY accumulator shared by `ddsketch`, `ddsketch_merge` and `approx_quantile`: one
//! sketch per group, values inserted straight from the Arrow buffers.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryBuilder, BooleanArray, Float64Array};
use arrow::datatypes::Float64Type;
use datafusion::common::Result;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};

use super::sketch::DdSketch;
use super::{SketchInput, SketchOutput, decode, merge_into};

/// Sketch state of all groups; a group without input has no sketch.
#[derive(Debug)]
pub(super) struct SketchGroups {
    function: &'static str,
    input: SketchInput,
    output: SketchOutput,
    sketches: Vec<Option<DdSketch>>,
    heap: usize,
}

impl SketchGroups {
    pub(super) fn new(function: &'static str, input: SketchInput, output: SketchOutput) -> Self {
        Self { function, input, output, sketches: Vec::new(), heap: 0 }
    }

    fn merge_binary(&mut self, array: &ArrayRef, group_indices: &[usize], filter: Option<&BooleanArray>) -> Result<()> {
        let array = array.as_binary::<i32>();
        for (i, &g) in group_indices.iter().enumerate() {
            if array.is_null(i) || filter.is_some_and(|f| !f.is_valid(i) || !f.value(i)) {
                continue;
            }
            let other = decode(array.value(i), self.function)?;
            self.heap += other.heap_size();
            merge_into(&mut self.sketches[g], other, self.function)?;
        }
        Ok(())
    }

    fn emit(&mut self, emit_to: EmitTo) -> Vec<Option<DdSketch>> {
        let taken = emit_to.take_needed(&mut self.sketches);
        if self.sketches.is_empty() {
            self.heap = 0;
        }
        taken
    }

    fn encode(taken: &[Option<DdSketch>]) -> ArrayRef {
        let mut builder = BinaryBuilder::with_capacity(taken.len(), taken.len() * 64);
        let mut buf = Vec::new();
        for s in taken {
            match s.as_ref().filter(|s| s.count() > 0) {
                Some(s) => {
                    buf.clear();
                    s.encode_into(&mut buf);
                    builder.append_value(&buf);
                }
                None => builder.append_null(),
            }
        }
        Arc::new(builder.finish())
    }
}

impl GroupsAccumulator for SketchGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.sketches.resize_with(total_num_groups.max(self.sketches.len()), || None);
        let mapping = match self.input {
            SketchInput::Values(m) => m,
            SketchInput::Sketches => {
                return self.merge_binary(&values[0], group_indices, opt_filter);
            }
        };
        let array = values[0].as_primitive::<Float64Type>();
        let data = array.values();
        let dense = array.null_count() == 0 && opt_filter.is_none();
        for (i, &g) in group_indices.iter().enumerate() {
            if !dense && (array.is_null(i) || opt_filter.is_some_and(|f| !f.is_valid(i) || !f.value(i))) {
                continue;
            }
            let sketch = self.sketches[g].get_or_insert_with(|| DdSketch::new(mapping));
            let before = sketch.heap_size();
            sketch.insert(data[i]);
            self.heap = (self.heap + sketch.heap_size()).saturating_sub(before);
        }
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let taken = self.emit(emit_to);
        Ok(match self.output {
            SketchOutput::Sketch => Self::encode(&taken),
            SketchOutput::Quantile(q) => {
                Arc::new(taken.iter().map(|s| s.as_ref().and_then(|s| s.quantile(q))).collect::<Float64Array>())
            }
        })
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let taken = self.emit(emit_to);
        Ok(vec![Self::encode(&taken)])
    }

    fn merge_batch(&mut self, values: &[ArrayRef], group_indices: &[usize], total_num_groups: usize) -> Result<()> {
        self.sketches.resize_with(total_num_groups.max(self.sketches.len()), || None);
        self.merge_binary(&values[0], group_indices, None)
    }

    fn convert_to_state(&self, values: &[ArrayRef], opt_filter: Option<&BooleanArray>) -> Result<Vec<ArrayRef>> {
        let mapping = match self.input {
            SketchInput::Values(m) => m,
            // Sketch inputs already are states; filtered rows become NULL.
            SketchInput::Sketches => {
                let array = values[0].as_binary::<i32>();
                let mut builder = BinaryBuilder::with_capacity(array.len(), array.values().len());
                for i in 0..array.len() {
                    if array.is_null(i) || opt_filter.is_some_and(|f| !f.is_valid(i) || !f.value(i)) {
                        builder.append_null();
                    } else {
                        builder.append_value(array.value(i));
                    }
                }
                return Ok(vec![Arc::new(builder.finish())]);
            }
        };
        let array = values[0].as_primitive::<Float64Type>();
        let mut builder = BinaryBuilder::with_capacity(array.len(), array.len() * 40);
        let mut buf = Vec::new();
        for i in 0..array.len() {
            if array.is_null(i) || opt_filter.is_some_and(|f| !f.is_valid(i) || !f.value(i)) {
                builder.append_null();
                continue;
            }
            let mut s = DdSketch::new(mapping);
            s.insert(array.value(i));
            buf.clear();
            s.encode_into(&mut buf);
            builder.append_value(&buf);
        }
        Ok(vec![Arc::new(builder.finish())])
    }

    fn size(&self) -> usize {
        self.sketches.capacity() * size_of::<Option<DdSketch>>() + self.heap
    }
}
