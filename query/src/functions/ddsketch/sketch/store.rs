//! Bin counts of one sign of a DDSketch: a contiguous range of bins starting at `offset`,
//! collapsing the lowest bins into the lowest kept one past the store's limit, so the final
//! layout depends only on the set of values added, not on their order.

/// Contiguous bin counts starting at `offset`, collapsing the lowest bins past `limit`
/// ([`super::Mapping::max_bins`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Store {
    pub(super) offset: i32,
    pub(super) bins: Vec<u64>,
    pub(super) count: u64,
    limit: usize,
}

impl Store {
    /// An empty store keeping at most `limit` contiguous bins.
    pub(super) fn with_limit(limit: usize) -> Self {
        Store { offset: 0, bins: Vec::new(), count: 0, limit: limit.max(1) }
    }

    #[inline]
    pub(super) fn add(&mut self, index: i32, n: u64) {
        self.count = self.count.saturating_add(n);
        if self.bins.is_empty() {
            self.offset = index;
            self.bins.push(n);
            return;
        }
        let rel = i64::from(index) - i64::from(self.offset);
        if rel >= 0 && (rel as usize) < self.bins.len() {
            self.bins[rel as usize] = self.bins[rel as usize].saturating_add(n);
        } else {
            self.add_outside(index, n);
        }
    }

    #[cold]
    fn add_outside(&mut self, index: i32, n: u64) {
        let max_bins = self.limit;
        let offset = i64::from(self.offset);
        let max = offset + self.bins.len() as i64 - 1;
        let index64 = i64::from(index);
        if index64 > max {
            let new_len = (index64 - offset + 1) as usize;
            if new_len <= max_bins {
                self.bins.resize(new_len, 0);
                self.bins[new_len - 1] = n;
            } else {
                // Re-base on the new top, folding everything below the kept range.
                let new_offset = index64 - max_bins as i64 + 1;
                let mut bins = vec![0u64; max_bins];
                for (i, &c) in self.bins.iter().enumerate() {
                    let slot = (offset + i as i64 - new_offset).max(0) as usize;
                    bins[slot] = bins[slot].saturating_add(c);
                }
                bins[max_bins - 1] = bins[max_bins - 1].saturating_add(n);
                self.bins = bins;
                self.offset = index - max_bins as i32 + 1;
            }
        } else {
            // index < offset: grow downwards, but never past max_bins below the top.
            let lowest_kept = (max - max_bins as i64 + 1).max(index64);
            let grow = (offset - lowest_kept) as usize;
            if grow > 0 {
                let mut bins = vec![0; grow + self.bins.len()];
                bins[grow..].copy_from_slice(&self.bins);
                self.bins = bins;
                self.offset = lowest_kept as i32;
            }
            self.bins[0] = self.bins[0].saturating_add(n);
        }
    }

    /// Removes one count from the bin `index` was added to (the lowest kept bin if collapsed).
    pub(super) fn remove(&mut self, index: i32) {
        if self.bins.is_empty() {
            return;
        }
        let rel = (i64::from(index) - i64::from(self.offset)).max(0) as usize;
        if let Some(bin) = self.bins.get_mut(rel)
            && *bin > 0
        {
            *bin -= 1;
            self.count -= 1;
        }
    }

    pub(super) fn merge(&mut self, other: &Store) {
        for (i, &c) in other.bins.iter().enumerate() {
            if c > 0 {
                self.add(other.offset + i as i32, c);
            }
        }
    }

    /// Non-empty bins in ascending index order.
    pub(super) fn entries(&self) -> impl DoubleEndedIterator<Item = (i32, u64)> + '_ {
        self.bins.iter().enumerate().filter(|(_, c)| **c > 0).map(|(i, c)| (self.offset + i as i32, *c))
    }
}
