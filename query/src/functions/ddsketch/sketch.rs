//! The DDSketch data structure behind `ddsketch`, `ddsketch_merge`, `ddsketch_quantile` and
//! `approx_quantile`: a mergeable quantile sketch with a relative-error guarantee.
//!
//! A value `x > 0` goes to bin `i = ceil(log_γ(x))` with `γ = (1 + α) / (1 − α)`, so the bin
//! covers `(γ^(i−1), γ^i]` and its representative `γ^i (1 − α)` is within relative error `α`
//! of every value in it. Negative values use the same mapping on `|x|` in a second store.
//! Magnitudes below `Mapping::min_indexable` (subnormals and zero) count as exact zeros;
//! `NaN`, `+inf` and `−inf` are counted separately so quantiles order them like the exact
//! `quantile_cont` does (`−inf < finite < +inf < NaN`).
//!
//! Each store keeps at most [`Mapping::max_bins`] contiguous bins; beyond that the lowest-magnitude bins
//! are collapsed into the lowest kept one (at α = 0.01 this only happens when the data spans
//! more than a factor of about 1e284). Merging adds bin counts, so it is exactly associative and
//! commutative: a sketch of the union equals the merge of sketches of the parts, bin for bin.
//!
//! Binary state (little endian, version 1): `u8 version = 1`, `f64 alpha`, varints `zero`,
//! `nan`, `pos_inf`, `neg_inf` counts, `f64 min`, `f64 max` (over finite values; `+inf`/`−inf`
//! when none), then the positive and the negative store, each as a varint entry count followed
//! by `(zigzag varint index delta, varint count)` pairs for the non-empty bins in ascending
//! index order.

mod store;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

use self::store::Store;

/// Default relative accuracy of `ddsketch` and `approx_quantile`.
pub const DEFAULT_ALPHA: f64 = 0.01;
/// Smallest accepted relative accuracy (smaller ones make bins too many to be useful).
pub const MIN_ALPHA: f64 = 1e-4;
/// Largest accepted relative accuracy.
pub const MAX_ALPHA: f64 = 0.5;
/// Contiguous bins per store before the lowest ones are collapsed, at least ...
pub const MAX_BINS: usize = 1 << 15;
/// ... and at least enough for magnitudes spanning this factor: at α = 0.0001 32,768 bins
/// cover only a factor of about 700, and the median of (1, 2, 3, 100000) came out as 142.5
/// (QA pass 23b); 1e12 takes 138,156 bins there (about 1 MiB a store at most).
pub const MIN_SPAN: f64 = 1e12;
/// Version byte of the binary state.
const VERSION: u8 = 1;

/// Why a binary sketch could not be decoded or merged.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SketchError {
    /// The bytes end before the structure does.
    #[error("ddsketch state truncated")]
    Truncated,
    /// The version byte is not one this build reads.
    #[error("ddsketch state has unknown version {0}")]
    UnknownVersion(u8),
    /// The relative accuracy is outside `[MIN_ALPHA, MAX_ALPHA]` or not a number.
    #[error("ddsketch relative accuracy {0} outside [{MIN_ALPHA}, {MAX_ALPHA}]")]
    InvalidAlpha(f64),
    /// Two sketches with different relative accuracies cannot be merged.
    #[error("cannot merge ddsketches with relative accuracy {0} and {1}")]
    AlphaMismatch(f64, f64),
    /// Bytes are left over after the structure.
    #[error("ddsketch state has {0} trailing bytes")]
    TrailingBytes(usize),
    /// A bin index is outside the representable range.
    #[error("ddsketch state has a bin index out of range")]
    IndexOutOfRange,
    /// The counts sum past [`MAX_COUNT`] (in one state, or in a merge).
    #[error("ddsketch counts sum past 2^62 values")]
    CountOutOfRange,
    /// The state's minimum is above its maximum although it counts values.
    #[error("ddsketch state has its minimum {0} above its maximum {1}")]
    MinAboveMax(f64, f64),
}

/// The most values a sketch counts (2^62): any two sum without overflowing a u64, and no
/// real stream gets near it. A state counting more is corrupt.
pub const MAX_COUNT: u64 = 1 << 62;

/// The logarithmic index mapping for one relative accuracy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mapping {
    alpha: f64,
    ln_gamma: f64,
    inv_ln_gamma: f64,
    /// Smallest magnitude that gets its own bin; smaller ones count as zero.
    min_indexable: f64,
}

impl Mapping {
    /// Creates the mapping for relative accuracy `alpha` in `[MIN_ALPHA, MAX_ALPHA]`.
    pub fn new(alpha: f64) -> Result<Self, SketchError> {
        if !(MIN_ALPHA..=MAX_ALPHA).contains(&alpha) {
            return Err(SketchError::InvalidAlpha(alpha));
        }
        let gamma = (1.0 + alpha) / (1.0 - alpha);
        let ln_gamma = gamma.ln();
        Ok(Self { alpha, ln_gamma, inv_ln_gamma: 1.0 / ln_gamma, min_indexable: f64::MIN_POSITIVE * gamma })
    }

    /// The relative accuracy.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// Contiguous bins a store keeps: [`MAX_BINS`], or those of a factor of [`MIN_SPAN`] when
    /// that is more (α below about 0.0004).
    pub fn max_bins(&self) -> usize {
        MAX_BINS.max((MIN_SPAN.ln() * self.inv_ln_gamma).ceil() as usize + 1)
    }

    /// Bin index of a finite magnitude `m >= min_indexable`.
    #[inline]
    fn index(&self, m: f64) -> i32 {
        // |index| <= 709.8 / ln(γ) < 2^31 for α >= MIN_ALPHA, so the cast cannot saturate.
        (m.ln() * self.inv_ln_gamma).ceil() as i32
    }

    /// Representative magnitude of bin `i`: `γ^i (1 − α)`, within `α` of the whole bin.
    #[inline]
    fn value(&self, index: i32) -> f64 {
        (f64::from(index) * self.ln_gamma + (1.0 - self.alpha).ln()).exp()
    }
}

/// A DDSketch with relative accuracy `alpha`.
#[derive(Debug, Clone, PartialEq)]
pub struct DdSketch {
    mapping: Mapping,
    positive: Store,
    negative: Store,
    zero: u64,
    nan: u64,
    pos_inf: u64,
    neg_inf: u64,
    min: f64,
    max: f64,
    /// Whether `min` is the exact minimum; after removing the minimum it is only a bound.
    exact_min: bool,
    /// Whether `max` is the exact maximum.
    exact_max: bool,
}

impl DdSketch {
    /// An empty sketch using `mapping`.
    pub fn new(mapping: Mapping) -> Self {
        Self {
            mapping,
            positive: Store::with_limit(mapping.max_bins()),
            negative: Store::with_limit(mapping.max_bins()),
            zero: 0,
            nan: 0,
            pos_inf: 0,
            neg_inf: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            exact_min: true,
            exact_max: true,
        }
    }

    /// The relative accuracy.
    pub fn alpha(&self) -> f64 {
        self.mapping.alpha
    }

    /// Number of values added (including NaN and infinities).
    pub fn count(&self) -> u64 {
        self.positive.count + self.negative.count + self.zero + self.nan + self.pos_inf + self.neg_inf
    }

    /// Adds one value.
    #[inline]
    pub fn insert(&mut self, x: f64) {
        let m = x.abs();
        if m >= self.mapping.min_indexable && m < f64::INFINITY {
            self.widen(x);
            let index = self.mapping.index(m);
            if x > 0.0 {
                self.positive.add(index, 1);
            } else {
                self.negative.add(index, 1);
            }
        } else if m < self.mapping.min_indexable {
            self.widen(x);
            self.zero += 1;
        } else if x.is_nan() {
            self.nan += 1;
        } else if x > 0.0 {
            self.pos_inf += 1;
        } else {
            self.neg_inf += 1;
        }
    }

    /// Removes one earlier-inserted value (sliding windows). The min/max bounds keep their
    /// values, so they still enclose the remaining values and clamping stays sound.
    pub fn remove(&mut self, x: f64) {
        let m = x.abs();
        if m < f64::INFINITY {
            self.exact_min &= x > self.min;
            self.exact_max &= x < self.max;
        }
        if m >= self.mapping.min_indexable && m < f64::INFINITY {
            let index = self.mapping.index(m);
            if x > 0.0 { self.positive.remove(index) } else { self.negative.remove(index) }
        } else if m < self.mapping.min_indexable {
            self.zero = self.zero.saturating_sub(1);
        } else if x.is_nan() {
            self.nan = self.nan.saturating_sub(1);
        } else if x > 0.0 {
            self.pos_inf = self.pos_inf.saturating_sub(1);
        } else {
            self.neg_inf = self.neg_inf.saturating_sub(1);
        }
    }

    /// Adds every value of `other`; both must have the same relative accuracy.
    pub fn merge(&mut self, other: &DdSketch) -> Result<(), SketchError> {
        if self.mapping.alpha.to_bits() != other.mapping.alpha.to_bits() {
            return Err(SketchError::AlphaMismatch(self.mapping.alpha, other.mapping.alpha));
        }
        // Both at most MAX_COUNT (decoded or built): the sum does not overflow.
        if self.count() + other.count() > MAX_COUNT {
            return Err(SketchError::CountOutOfRange);
        }
        self.positive.merge(&other.positive);
        self.negative.merge(&other.negative);
        self.zero = self.zero.saturating_add(other.zero);
        self.nan = self.nan.saturating_add(other.nan);
        self.pos_inf = self.pos_inf.saturating_add(other.pos_inf);
        self.neg_inf = self.neg_inf.saturating_add(other.neg_inf);
        if other.min < self.min || (other.min == self.min && other.exact_min) {
            (self.min, self.exact_min) = (other.min, other.exact_min);
        }
        if other.max > self.max || (other.max == self.max && other.exact_max) {
            (self.max, self.exact_max) = (other.max, other.exact_max);
        }
        Ok(())
    }

    /// Extends the bounds to `x`; a value at or beyond a bound is the exact extreme.
    #[inline]
    fn widen(&mut self, x: f64) {
        if x <= self.min {
            self.min = x;
            self.exact_min = true;
        }
        if x >= self.max {
            self.max = x;
            self.exact_max = true;
        }
    }

    /// Estimate of the value with 0-based ascending rank `rank < count()`.
    fn value_at_rank(&self, rank: u64) -> f64 {
        // A manual clamp: `f64::clamp` panics on an inverted range from a corrupt state.
        let clamp = |v: f64| {
            if v < self.min {
                self.min
            } else if v > self.max {
                self.max
            } else {
                v
            }
        };
        let finite = self.negative.count + self.zero + self.positive.count;
        // The smallest and largest finite values are kept exactly (unless removed).
        if finite > 0 && self.exact_min && rank == self.neg_inf {
            return self.min;
        }
        if finite > 0 && self.exact_max && rank == self.neg_inf + finite - 1 {
            return self.max;
        }
        let mut r = rank;
        if r < self.neg_inf {
            return f64::NEG_INFINITY;
        }
        r -= self.neg_inf;
        if r < self.negative.count {
            for (index, c) in self.negative.entries().rev() {
                if r < c {
                    return clamp(-self.mapping.value(index));
                }
                r -= c;
            }
            return clamp(0.0);
        }
        r -= self.negative.count;
        if r < self.zero {
            return clamp(0.0);
        }
        r -= self.zero;
        if r < self.positive.count {
            for (index, c) in self.positive.entries() {
                if r < c {
                    return clamp(self.mapping.value(index));
                }
                r -= c;
            }
            return clamp(0.0);
        }
        r -= self.positive.count;
        if r < self.pos_inf { f64::INFINITY } else { f64::NAN }
    }

    /// The `q`-quantile with the same definition as `quantile_cont`: position `(n − 1) q`,
    /// linear interpolation between the estimates of the two neighbouring order statistics.
    /// `None` for an empty sketch.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rn = (n - 1) as f64 * q.clamp(0.0, 1.0);
        let (lo, hi) = (rn.floor(), rn.ceil());
        let lo_v = self.value_at_rank(lo as u64);
        if lo == hi {
            return Some(lo_v);
        }
        let hi_v = self.value_at_rank((hi as u64).min(n - 1));
        Some(crate::functions::quantile_cont::interpolate(lo_v, hi_v, rn - lo))
    }

    /// Appends the binary state (see the module documentation) to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.push(VERSION);
        out.extend_from_slice(&self.mapping.alpha.to_le_bytes());
        for c in [self.zero, self.nan, self.pos_inf, self.neg_inf] {
            put_varint(out, c);
        }
        let (min, max) = self.encoded_bounds();
        out.extend_from_slice(&min.to_le_bytes());
        out.extend_from_slice(&max.to_le_bytes());
        for store in [&self.positive, &self.negative] {
            put_varint(out, store.entries().count() as u64);
            let mut prev = 0i64;
            for (index, c) in store.entries() {
                put_varint(out, zigzag(i64::from(index) - prev));
                put_varint(out, c);
                prev = i64::from(index);
            }
        }
    }

    /// The min/max written to the state, which readers take as exact. After a removal the
    /// stored ones are only bounds, so the estimates of the extreme order statistics (within
    /// `alpha` of the true extremes) are written instead.
    fn encoded_bounds(&self) -> (f64, f64) {
        let finite = self.negative.count + self.zero + self.positive.count;
        if finite == 0 {
            return (f64::INFINITY, f64::NEG_INFINITY);
        }
        let min = if self.exact_min { self.min } else { self.value_at_rank(self.neg_inf) };
        let max = if self.exact_max { self.max } else { self.value_at_rank(self.neg_inf + finite - 1) };
        (min, max)
    }

    /// The binary state as a new vector.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        self.encode_into(&mut out);
        out
    }

    /// Decodes a binary state written by [`DdSketch::encode_into`].
    pub fn decode(bytes: &[u8]) -> Result<Self, SketchError> {
        let mut r = Reader { bytes, pos: 0 };
        let version = r.byte()?;
        if version != VERSION {
            return Err(SketchError::UnknownVersion(version));
        }
        let mut sketch = DdSketch::new(Mapping::new(r.f64()?)?);
        // Every count goes through `counted`: their sum stays at most MAX_COUNT.
        let mut total = 0u64;
        let mut counted = |c: u64| -> Result<u64, SketchError> {
            total = total.checked_add(c).filter(|t| *t <= MAX_COUNT).ok_or(SketchError::CountOutOfRange)?;
            Ok(c)
        };
        sketch.zero = counted(r.varint()?)?;
        sketch.nan = counted(r.varint()?)?;
        sketch.pos_inf = counted(r.varint()?)?;
        sketch.neg_inf = counted(r.varint()?)?;
        sketch.min = r.f64()?;
        sketch.max = r.f64()?;
        for negative in [false, true] {
            let entries = r.varint()?;
            let mut index = 0i64;
            for _ in 0..entries {
                index = index.checked_add(unzigzag(r.varint()?)).ok_or(SketchError::IndexOutOfRange)?;
                let index = i32::try_from(index).map_err(|_| SketchError::IndexOutOfRange)?;
                let c = counted(r.varint()?)?;
                let store = if negative { &mut sketch.negative } else { &mut sketch.positive };
                if c > 0 {
                    store.add(index, c);
                }
            }
        }
        if r.pos != bytes.len() {
            return Err(SketchError::TrailingBytes(bytes.len() - r.pos));
        }
        let finite = sketch.positive.count + sketch.negative.count + sketch.zero;
        // NaN bounds are as corrupt as inverted ones.
        let ordered =
            matches!(sketch.min.partial_cmp(&sketch.max), Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal));
        if finite > 0 && !ordered {
            return Err(SketchError::MinAboveMax(sketch.min, sketch.max));
        }
        Ok(sketch)
    }

    /// Approximate heap bytes used, for memory accounting.
    pub fn heap_size(&self) -> usize {
        (self.positive.bins.capacity() + self.negative.bins.capacity()) * 8
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, SketchError> {
        let b = *self.bytes.get(self.pos).ok_or(SketchError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    fn f64(&mut self) -> Result<f64, SketchError> {
        let end = self.pos.checked_add(8).ok_or(SketchError::Truncated)?;
        let slice = self.bytes.get(self.pos..end).ok_or(SketchError::Truncated)?;
        let mut buf = [0u8; 8];
        buf.copy_from_slice(slice);
        self.pos = end;
        Ok(f64::from_le_bytes(buf))
    }

    fn varint(&mut self) -> Result<u64, SketchError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(SketchError::Truncated)
    }
}
