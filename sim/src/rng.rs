//! A small deterministic random number generator (xoshiro256++ seeded through splitmix64) and
//! the distributions the simulator draws from, plus stateless hash noise so that two parts of the
//! simulator (the workload model and a metric emitter) can see the same noisy value for a time
//! bucket without sharing state.

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// One splitmix64 step: advances `state` and returns a well-mixed 64-bit value.
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(GOLDEN);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A deterministic uniform value in `[0, 1)` derived from a seed and two keys.
pub(crate) fn hash_unit(seed: u64, a: u64, b: u64) -> f64 {
    let mut s = seed ^ a.wrapping_mul(GOLDEN) ^ b.rotate_left(29).wrapping_mul(0xD1B5_4A32_D192_ED03);
    to_unit(splitmix64(&mut s))
}

/// A deterministic standard normal value derived from a seed and two keys.
pub(crate) fn hash_normal(seed: u64, a: u64, b: u64) -> f64 {
    let u1 = 1.0 - hash_unit(seed, a, b);
    let u2 = hash_unit(seed ^ 0x5555_5555_5555_5555, a, b);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

fn to_unit(x: u64) -> f64 {
    (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// xoshiro256++: fast, small state, good statistical quality; not cryptographic.
#[derive(Debug, Clone)]
pub(crate) struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator whose whole sequence is determined by `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        let mut st = seed;
        Self { s: [splitmix64(&mut st), splitmix64(&mut st), splitmix64(&mut st), splitmix64(&mut st)] }
    }

    /// An independent stream for one purpose, so that adding draws in one part of the simulator
    /// does not shift the numbers another part sees.
    pub(crate) fn stream(seed: u64, purpose: u64) -> Self {
        let mut st = seed ^ purpose.wrapping_mul(0xA076_1D64_78BD_642F);
        Self::new(splitmix64(&mut st))
    }

    /// The next raw 64-bit value.
    pub(crate) fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn f64(&mut self) -> f64 {
        to_unit(self.next_u64())
    }

    /// Uniform in `[lo, hi)`.
    pub(crate) fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.f64()
    }

    /// Uniform integer in `[0, n)`; `n` must be positive.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// True with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        self.f64() < p
    }

    /// Standard normal (Box–Muller).
    pub(crate) fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.f64();
        let u2 = self.f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Exponential with the given mean.
    pub(crate) fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.f64()).ln()
    }

    /// Log-normal multiplier with mean 1 and log-space standard deviation `sigma`.
    pub(crate) fn lognormal(&mut self, sigma: f64) -> f64 {
        (sigma * self.normal() - 0.5 * sigma * sigma).exp()
    }

    /// Pareto multiplier (≥ 1) with tail index `alpha`: heavy-tailed spikes.
    pub(crate) fn pareto(&mut self, alpha: f64) -> f64 {
        (1.0 - self.f64()).powf(-1.0 / alpha)
    }

    /// Poisson count with mean `lambda` (exact for small means, normal approximation above 30).
    pub(crate) fn poisson(&mut self, lambda: f64) -> u64 {
        if lambda <= 0.0 {
            return 0;
        }
        if lambda > 30.0 {
            let x = lambda + lambda.sqrt() * self.normal();
            return x.round().max(0.0) as u64;
        }
        let limit = (-lambda).exp();
        let mut k = 0u64;
        let mut p = self.f64();
        while p > limit {
            k += 1;
            p *= self.f64();
        }
        k
    }
}

/// Smooth step from 0 (at `start`) to 1 (at `start + dur`); 0 before, 1 after.
pub(crate) fn ramp(t: i64, start: i64, dur: i64) -> f64 {
    if t <= start {
        return 0.0;
    }
    if dur <= 0 || t >= start + dur {
        return 1.0;
    }
    let x = (t - start) as f64 / dur as f64;
    x * x * (3.0 - 2.0 * x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_streams_differ() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let mut c = Rng::stream(7, 1);
        let mut d = Rng::stream(7, 2);
        assert_ne!(c.next_u64(), d.next_u64());
    }

    #[test]
    fn distributions_have_the_right_means() {
        let mut r = Rng::new(42);
        let n = 200_000;
        let mean_exp = (0..n).map(|_| r.exp(3.0)).sum::<f64>() / n as f64;
        assert!((mean_exp - 3.0).abs() < 0.05, "{mean_exp}");
        let mean_ln = (0..n).map(|_| r.lognormal(0.5)).sum::<f64>() / n as f64;
        assert!((mean_ln - 1.0).abs() < 0.02, "{mean_ln}");
        let mean_p = (0..n).map(|_| r.poisson(4.0) as f64).sum::<f64>() / n as f64;
        assert!((mean_p - 4.0).abs() < 0.05, "{mean_p}");
        let below: Vec<usize> = (0..1000).map(|_| r.below(5)).collect();
        assert!(below.iter().all(|&x| x < 5) && below.contains(&0) && below.contains(&4));
        assert!(hash_unit(1, 2, 3) == hash_unit(1, 2, 3) && hash_unit(1, 2, 3) != hash_unit(1, 2, 4));
    }

    #[test]
    fn ramp_is_monotone_and_bounded() {
        assert_eq!(ramp(0, 10, 10), 0.0);
        assert_eq!(ramp(25, 10, 10), 1.0);
        assert!((ramp(15, 10, 10) - 0.5).abs() < 1e-12);
        assert!(ramp(12, 10, 10) < ramp(13, 10, 10));
    }
}
