//! Rank-based Gaussianisation ("normal scores"): the robust front end of change detection.
//!
//! Each value is replaced by `Φ⁻¹(rank / (n + 1))`. The result is standard normal whatever
//! the original distribution (heavy tails, outliers, ±inf), so a Gaussian cost on the scores
//! needs no noise model and no per-series tuning. Ties are broken by a seeded pseudo-random
//! key, so plateaus of equal values carry no artificial order.

use super::rng::mix;

/// Normal scores of `values` (which must not contain `NaN`), ties broken by `seed`.
pub fn normal_scores(values: &[f64], seed: u64, out: &mut Vec<f64>) {
    let n = values.len();
    let mut order: Vec<(f64, u64, u32)> = values
        .iter()
        .enumerate()
        .map(|(i, v)| (*v, mix(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)), i as u32))
        .collect();
    order.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    out.clear();
    out.resize(n, 0.0);
    let denom = n as f64 + 1.0;
    for (rank, (_, _, i)) in order.iter().enumerate() {
        out[*i as usize] = inverse_normal_cdf((rank as f64 + 1.0) / denom);
    }
}

/// The standard normal quantile function `Φ⁻¹(p)` for `p` in `(0, 1)` (Wichura's AS 241,
/// relative error about 1e-16). Returns ±inf at 0 and 1 and `NaN` outside `[0, 1]`.
pub fn inverse_normal_cdf(p: f64) -> f64 {
    if !(0.0..=1.0).contains(&p) {
        return f64::NAN;
    }
    if p == 0.0 {
        return f64::NEG_INFINITY;
    }
    if p == 1.0 {
        return f64::INFINITY;
    }
    let q = p - 0.5;
    if q.abs() <= 0.425 {
        let r = 0.180625 - q * q;
        return q * poly(&A, r) / poly(&B, r);
    }
    let r = if q < 0.0 { p } else { 1.0 - p };
    let r = (-r.ln()).sqrt();
    let v = if r <= 5.0 {
        let r = r - 1.6;
        poly(&C, r) / poly(&D, r)
    } else {
        let r = r - 5.0;
        poly(&E, r) / poly(&F, r)
    };
    if q < 0.0 { -v } else { v }
}

fn poly(c: &[f64; 8], x: f64) -> f64 {
    c.iter().rev().fold(0.0, |acc, k| acc * x + k)
}

#[allow(clippy::excessive_precision)]
const A: [f64; 8] = [
    3.387_132_872_796_366_5,
    133.141_667_891_784_38,
    1_971.590_950_306_551_3,
    13_731.693_765_509_461,
    45_921.953_931_549_87,
    67_265.770_927_008_7,
    33_430.575_583_588_13,
    2_509.080_928_730_122_7,
];
#[allow(clippy::excessive_precision)]
const B: [f64; 8] = [
    1.0,
    42.313_330_701_600_91,
    687.187_007_492_057_9,
    5_394.196_021_424_751,
    21_213.794_301_586_597,
    39_307.895_800_092_71,
    28_729.085_735_721_943,
    5_226.495_278_852_545,
];
#[allow(clippy::excessive_precision)]
const C: [f64; 8] = [
    1.423_437_110_749_683_5,
    4.630_337_846_156_546,
    5.769_497_221_460_691,
    3.647_848_324_763_204_5,
    1.270_458_252_452_368_4,
    0.241_780_725_177_450_6,
    0.022_723_844_989_269_184,
    7.745_450_142_783_414e-4,
];
#[allow(clippy::excessive_precision)]
const D: [f64; 8] = [
    1.0,
    2.053_191_626_637_759,
    1.676_384_830_183_803_8,
    0.689_767_334_985_1,
    0.148_103_976_427_480_08,
    0.015_198_666_563_616_457,
    5.475_938_084_995_345e-4,
    1.050_750_071_644_416_9e-9,
];
#[allow(clippy::excessive_precision)]
const E: [f64; 8] = [
    6.657_904_643_501_103,
    5.463_784_911_164_114,
    1.784_826_539_917_291_3,
    0.296_560_571_828_504_87,
    0.026_532_189_526_576_124,
    0.001_242_660_947_388_078_4,
    2.711_555_568_743_487_6e-5,
    2.010_334_399_292_288_1e-7,
];
#[allow(clippy::excessive_precision)]
const F: [f64; 8] = [
    1.0,
    0.599_832_206_555_888,
    0.136_929_880_922_735_8,
    0.014_875_361_290_850_615,
    7.868_691_311_456_133e-4,
    1.846_318_317_510_054_8e-5,
    1.421_511_758_316_446e-7,
    2.044_263_103_389_939_7e-15,
];

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_match_known_values() {
        for (p, z) in [
            (0.5, 0.0),
            (0.975, 1.959_963_984_540_054),
            (0.025, -1.959_963_984_540_054),
            (0.8413447460685429, 1.0),
            (1e-10, -6.361_340_902_404_056),
            (1e-300, -37.047_096_299_361_2),
        ] {
            let got = inverse_normal_cdf(p);
            assert!((got - z).abs() < 1e-9 * z.abs().max(1.0), "p {p}: {got} vs {z}");
        }
        assert_eq!(inverse_normal_cdf(0.0), f64::NEG_INFINITY);
        assert!(inverse_normal_cdf(1.5).is_nan());
    }

    #[test]
    fn scores_are_monotone_in_values_and_ignore_scale() {
        let v = [3.0, -1.0, 1e300, f64::INFINITY, 0.5, f64::NEG_INFINITY];
        let mut s = Vec::new();
        normal_scores(&v, 1, &mut s);
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
        for w in idx.windows(2) {
            assert!(s[w[0]] < s[w[1]]);
        }
        assert!(s.iter().all(|z| z.is_finite()));
        let sum: f64 = s.iter().sum();
        assert!(sum.abs() < 1e-12);
    }

    #[test]
    fn ties_get_distinct_scores_without_positional_order() {
        let v = vec![1.0; 1_000];
        let mut s = Vec::new();
        normal_scores(&v, 7, &mut s);
        let first: f64 = s[..500].iter().sum::<f64>() / 500.0;
        let second: f64 = s[500..].iter().sum::<f64>() / 500.0;
        assert!((first - second).abs() < 0.2, "{first} vs {second}");
        let mut again = Vec::new();
        normal_scores(&v, 7, &mut again);
        assert_eq!(s, again);
    }
}
