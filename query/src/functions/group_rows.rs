//! Shared by the groups accumulators that keep `(group, row)` pairs in flat vectors
//! (`quantile_cont`, the point state): which groups an emission takes and where each group's
//! rows go when they are regrouped by a counting sort.

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
pub(crate) fn emit_offsets(groups: &[u32], num_groups: usize, emit_to: EmitTo, name: &str) -> Result<(usize, Vec<i32>)> {
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
