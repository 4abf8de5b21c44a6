//! Shared by the groups accumulators that keep `(group, row)` pairs in flat vectors
//! (`quantile_cont`, the point state): which groups an emission takes, and taking them out
//! regrouped ([`take_grouped`], a counting sort unless the rows are already in group order).

use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::EmitTo;

/// The group count after an update that reports `total` groups: the larger of the two. Fails
/// when group indices would not fit the `u32` the accumulators store them as.
pub(crate) fn grow_groups(current: usize, total: usize, name: &str) -> Result<usize> {
    if total > u32::MAX as usize {
        return exec_err!("{name}: more than {} groups", u32::MAX);
    }
    Ok(current.max(total))
}

/// The groups emitted by `emit_to` out of `num_groups`, and the exclusive prefix offsets of
/// their row counts: rows of emitted group `g` go to `offsets[g]..offsets[g + 1]`. Fails when
/// the emitted rows do not fit Arrow's `i32` list offsets.
pub(crate) fn emit_offsets(
    groups: &[u32],
    num_groups: usize,
    emit_to: EmitTo,
    name: &str,
) -> Result<(usize, Vec<i32>)> {
    let emit = match emit_to {
        EmitTo::All => num_groups,
        EmitTo::First(n) => n.min(num_groups),
    };
    let mut counts = vec![0usize; emit + 1];
    for &g in groups {
        if (g as usize) < emit {
            counts[g as usize + 1] += 1;
        }
    }
    for g in 0..emit {
        counts[g + 1] += counts[g];
    }
    if i32::try_from(counts[emit]).is_err() {
        return exec_err!("{name}: more than {} values in one emission", i32::MAX);
    }
    Ok((emit, counts.iter().map(|&c| c as i32).collect()))
}

/// Columns of rows kept beside a flat vector of group indices, one entry per row.
pub(crate) trait RowColumns: Sized {
    /// Columns of `n` placeholder rows.
    fn zeroed(n: usize) -> Self;
    /// Splits off rows `at..`, keeping `..at`.
    fn split_off(&mut self, at: usize) -> Self;
    /// Writes row `from` of `self` to row `to` of `dst`.
    fn copy_row(&self, from: usize, dst: &mut Self, to: usize);
    /// Moves row `from` to row `to <= from` in place.
    fn move_row(&mut self, from: usize, to: usize);
    /// Keeps the first `n` rows.
    fn truncate(&mut self, n: usize);
}

impl RowColumns for Vec<f64> {
    fn zeroed(n: usize) -> Self {
        vec![0.0; n]
    }
    fn split_off(&mut self, at: usize) -> Self {
        Vec::split_off(self, at)
    }
    fn copy_row(&self, from: usize, dst: &mut Self, to: usize) {
        dst[to] = self[from];
    }
    fn move_row(&mut self, from: usize, to: usize) {
        self[to] = self[from];
    }
    fn truncate(&mut self, n: usize) {
        Vec::truncate(self, n);
    }
}

/// Removes the groups selected by `emit_to` from `groups` / `rows` (renumbering the remaining
/// groups from 0 and lowering `num_groups`) and returns their rows regrouped, with the offsets
/// of [`emit_offsets`]: rows `offsets[g]..offsets[g + 1]` of the result belong to emitted group
/// `g`. Rows already in group order (the usual case: group indices are assigned in order of
/// first appearance and one series' rows arrive together) are split off without copying;
/// otherwise one counting-sort pass scatters them.
pub(crate) fn take_grouped<C: RowColumns>(
    groups: &mut Vec<u32>,
    rows: &mut C,
    num_groups: &mut usize,
    emit_to: EmitTo,
    name: &str,
) -> Result<(Vec<i32>, C)> {
    let (emit, offsets) = emit_offsets(groups, *num_groups, emit_to, name)?;
    let taken = offsets[emit] as usize;
    let shift = emit as u32;
    *num_groups -= emit;
    if groups.is_sorted() {
        let rest_groups = groups.split_off(taken);
        let rest_rows = rows.split_off(taken);
        let out = std::mem::replace(rows, rest_rows);
        *groups = rest_groups;
        for g in groups.iter_mut() {
            *g -= shift;
        }
        return Ok((offsets, out));
    }
    let mut cursor: Vec<i32> = offsets[..emit].to_vec();
    let mut out = C::zeroed(taken);
    let mut w = 0;
    for r in 0..groups.len() {
        let g = groups[r];
        if g < shift {
            let c = &mut cursor[g as usize];
            rows.copy_row(r, &mut out, *c as usize);
            *c += 1;
        } else {
            groups[w] = g - shift;
            rows.move_row(r, w);
            w += 1;
        }
    }
    groups.truncate(w);
    rows.truncate(w);
    Ok((offsets, out))
}
