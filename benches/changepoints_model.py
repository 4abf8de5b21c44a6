#!/usr/bin/env python3
"""A Python model of `change_points`' default `'trend'` detector, for experiments on the tune half.

  benches/changepoints_model.py TCPD_DIR

Re-implements the steps of `engine/src/analysis/change_points.rs` (robust scale, winsorising
against an 11-sample running median, season removal, robust lag-1 autocorrelation and VIF,
piecewise-linear Gaussian cost with a slope penalty, exact optimal partitioning instead of
PELT) without the candidate grid, the refinement and the slope placement: it finds the same
number of changes as the Rust detector on every TCPD tune-half and quality-control series (the
first version: on all 31), at positions up to a few samples apart. It is how the penalty on the effective sample size was chosen (docs/change-points.md):
each experiment below prints TCPD tune-half and quality-control F1 / cover and a synthetic
suite (mean changes on null series, detection rate of single changes). It never prints the
eval half. `detect(..., neff=False, per_param=1.5)` is the first version.
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import changepoints_tcpd as tcpd  # noqa: E402


TRIM = 0.8


def tscale(v):
    v = np.asarray(v, float)
    if len(v) < 2:
        return 0.0
    d = np.abs(v - np.median(v))
    keep = min(max(int(np.ceil(TRIM * len(d))), 1), len(d))
    d = np.sort(d)[:keep]
    return float(np.sqrt(np.mean(d * d) / 0.4377))


def winsorise(z, half=5, sds=3.0):
    n = len(z)
    if n < 3:
        return z
    rm = np.array([np.median(z[max(0, i - half):min(n, i + half + 1)]) for i in range(n)])
    res = z - rm
    s = tscale(res)
    if not (s > 0 and np.isfinite(s)):
        return z
    return rm + np.clip(res, -sds * s, sds * s)


def lag1(z):
    if len(z) < 8:
        return 0.0
    s1 = tscale(np.diff(z))
    s2 = tscale(z[2:] - z[:-2])
    if s1 <= 0:
        return 1.0
    return (s2 / s1) ** 2 - 1


def seasonal_period(z, drop=0.8):
    n = len(z)
    max_lag = n // 3
    if max_lag < 5:
        return None
    t = np.arange(n) - (n - 1) / 2
    zm = z.mean()
    slope = (t * (z - zm)).sum() / (t * t).sum()
    d = z - zm - slope * t
    c0 = (d * d).sum()
    if not c0 > 0:
        return None
    acf = np.array([(d[: n - k] * d[k:]).sum() / c0 * n / (n - k) for k in range(max_lag + 1)])
    low = np.inf
    for k in range(1, max_lag):
        a = acf[k]
        if k >= 4 and a >= 0.5 and a - low >= drop and a >= acf[k - 1] and a >= acf[k + 1]:
            end = min(k + k // 2, max_lag)
            return int(k + np.argmax(acf[k:end + 1]))
        low = min(low, a)
    return None


def deseasonalise(z, p):
    n = len(z)
    if p < 2 or n < 2 * p:
        return z
    pre = np.concatenate([[0], np.cumsum(z)])
    h = p // 2
    res = np.array([z[i] - (pre[min(n, i + h + 1)] - pre[max(0, i - h)]) / (min(n, i + h + 1) - max(0, i - h))
                    for i in range(n)])
    prof = np.array([np.median(res[k::p]) for k in range(p)])
    prof -= prof.mean()
    return z - prof[np.arange(n) % p]


class Cost:
    def __init__(self, z, slope_pen, floor):
        n = len(z)
        t = np.arange(n) / n
        self.n = n
        self.p = {k: np.concatenate([[0.0], np.cumsum(v)]) for k, v in
                  dict(m=np.ones(n), st=t, stt=t * t, sz=z, szz=z * z, stz=t * z).items()}
        self.sp = slope_pen
        self.floor = floor

    def stats(self, a, b):
        return {k: v[b] - v[a] for k, v in self.p.items()}

    def cost_vec(self, s, t):
        """cost of [s, t) for an array of s."""
        P = self.p
        m = t - s
        sz = P["sz"][t] - P["sz"][s]
        szz = P["szz"][t] - P["szz"][s]
        rss = szz - sz * sz / m
        flat = self.seg(m, rss)
        if self.sp is None:
            return flat
        st = P["st"][t] - P["st"][s]
        stt = P["stt"][t] - P["stt"][s]
        stz = P["stz"][t] - P["stz"][s]
        vt = stt - st * st / m
        ctz = stz - st * sz / m
        ok = (m >= 2) & (vt > 1e-13 * np.maximum(stt, 1e-300))
        rss2 = np.where(ok, rss - np.where(ok, ctz * ctz / np.where(ok, vt, 1), 0), rss)
        line = self.seg(m, rss2) + self.sp
        return np.minimum(flat, line)

    def seg(self, m, rss):
        """The cost of segments of lengths `m` with residual sums of squares `rss`."""
        return m * np.log(np.maximum(rss / m, self.floor))

    def cost(self, a, b):
        return float(self.cost_vec(np.array([a]), b)[0])

    def fit(self, a, b):
        s = self.stats(a, b)
        m = s["m"]
        mz = s["sz"] / m
        rss = s["szz"] - s["sz"] * mz
        flat = (0.0, mz, max(rss / m, self.floor))
        if self.sp is None:
            return flat
        mt = s["st"] / m
        vt = s["stt"] - s["st"] * mt
        slope = 0.0
        if m >= 2 and vt > 1e-13 * s["stt"]:
            ctz = s["stz"] - s["st"] * mz
            slope = ctz / vt
            rss -= ctz * slope
        line = (slope, mz - slope * mt, max(rss / m, self.floor))
        return line if m * np.log(line[2]) + self.sp < m * np.log(flat[2]) else flat


class PriorCost(Cost):
    """Tried in the tenth round and left out: a conjugate (inverse-gamma) prior on each segment's
    residual variance, `nu` pseudo-samples at the noise variance (1 in these units). The segment
    cost is `(m + nu) * ln((rss + nu) / (m + nu)) + nu`, so short or repeated-value segments are
    not infinitely certain; `+ nu` is the per-segment constant of the minimised prior."""

    nu = 2.0

    def seg(self, m, rss):
        nu = self.nu
        return (m + nu) * np.log(np.maximum((np.maximum(rss, 0) + nu) / (m + nu), self.floor)) + nu


def opt_partition(cost, beta, min_size):
    n = cost.n
    f = np.full(n + 1, np.inf)
    prev = np.zeros(n + 1, int)
    f[0] = -beta
    for t in range(min_size, n + 1):
        s = np.arange(0, t - min_size + 1)
        v = f[s] + cost.cost_vec(s, t) + beta
        i = int(np.argmin(v))
        f[t] = v[i]
        prev[t] = s[i]
    cps = []
    t = n
    while t > 0:
        t = prev[t]
        if t > 0:
            cps.append(int(t))
    return sorted(cps)


def prepare(x, season=True, season_drop=0.8, seasons=1):
    x = np.asarray(x, float)
    center = np.median(x)
    scale = tscale(np.diff(x)) / np.sqrt(2)
    noisy = scale > 0
    if not noisy:
        scale = tscale(x)
    if not scale > 0:
        scale = max(x.std(), 1e-300)
    z = (x - center) / scale
    z = winsorise(z)
    found = []
    for _ in range(seasons if season else 0):
        p = seasonal_period(z, season_drop)
        if not p or p in found:
            break
        found.append(p)
        z = winsorise(deseasonalise(z, p))
    q = 0.0
    if noisy:
        u = np.unique(z)
        q = float(np.min(np.diff(u))) if len(u) > 1 else 0.0
    floor = max(q * q / 12, 1e-6)
    return z, floor


def second_order(vif, n, z, max_rho=0.8):
    """The default since branch `cp3`: a smooth curve, whose first differences are as
    persistent as the clamp on rho, has its VIF multiplied by theirs."""
    if not tscale(np.diff(np.diff(z))) > 0:
        return vif  # piecewise-constant differences (exact lines, noiseless steps): no estimate
    r2 = lag1(np.diff(z))
    if np.isfinite(r2) and r2 >= max_rho:
        r2 = min(r2, max_rho)
        vif *= (1 + r2) / (1 - r2)
    return vif


def detect(x, model="trend", scale=1.0, per_param=2.0, slope_params=2.0, max_rho=0.8, min_size=5,
           rho_fn=None, vif_fn=second_order, neff=True, neff_min=2.0, var_floor=0.0, season_drop=0.8,
           cost_cls=None, seasons=1):
    x = np.asarray(x, float)
    n = len(x)
    if n < 2 * min_size or np.all(x == x[0]):
        return []
    z, floor = prepare(x, season_drop=season_drop, seasons=seasons)
    floor = max(floor, var_floor)
    rho = lag1(z) if rho_fn is None else rho_fn(z)
    rho = min(max(rho, 0.0), max_rho) if np.isfinite(rho) else max_rho
    vif = (1 + rho) / (1 - rho)
    if vif_fn is not None:
        vif = vif_fn(vif, n, z)
    ln = np.log(max(n / vif, neff_min)) if neff else np.log(n)
    pp = scale * per_param * ln * vif
    sp = slope_params * pp if model == "trend" else None
    c = (cost_cls or Cost)(z, sp, floor)
    return opt_partition(c, 3 * pp, min_size)


def resid_rho(z, cps, c):
    """Lag-1 autocorrelation of the residuals of a segmentation (within segments)."""
    b = [0] + list(cps) + [len(z)]
    num = den = 0.0
    for a, e in zip(b, b[1:]):
        sl, ic, _ = c.fit(a, e)
        r = z[a:e] - (ic + sl * np.arange(a, e) / len(z))
        num += (r[:-1] * r[1:]).sum()
        den += (r * r).sum()
    return num / den if den > 0 else 0.0


def two_pass(x, first_scale=2.0, per_param=1.5, min_size=5):
    """Tried and left out: rho from the residuals of a first, BIC-penalised segmentation."""
    x = np.asarray(x, float)
    n = len(x)
    if n < 2 * min_size or np.all(x == x[0]):
        return []
    z, floor = prepare(x)
    pp1 = first_scale * per_param * np.log(n)
    c1 = Cost(z, 2 * pp1, floor)
    rho = min(max(resid_rho(z, opt_partition(c1, 3 * pp1, min_size), c1), 0.0), 0.8)
    pp = per_param * np.log(n) * (1 + rho) / (1 - rho)
    return opt_partition(Cost(z, 2 * pp, floor), 3 * pp, min_size)


def smoother_than_walk(vif, n, z):
    """Tried and left out: when the series is smoother than a random walk (rho estimate > 1),
    multiply the VIF by that of the first differences."""
    if lag1(z) > 1.0:
        r2 = min(max(lag1(np.diff(z)), 0.0), 0.8)
        vif *= (1 + r2) / (1 - r2)
    return vif


def prewhitened(x, min_size=5, max_rho=0.95, per_param=2.0):
    """Tried in the tenth round and left out (the AR1seg idea of Chakar et al. 2017): remove
    the robust AR(1) structure, `w = (z[t] - rho z[t-1]) / sqrt(1 - rho^2)`, then segment `w`
    with the piecewise-linear cost and the independent-samples penalty `2 ln n` per parameter."""
    x = np.asarray(x, float)
    if len(x) < 2 * min_size or np.all(x == x[0]):
        return []
    z, floor = prepare(x)
    rho = lag1(z)
    rho = min(max(rho, 0.0), max_rho) if np.isfinite(rho) else max_rho
    w = (z[1:] - rho * z[:-1]) / np.sqrt(1 - rho * rho)
    pp = per_param * np.log(len(w))
    return [c + 1 for c in opt_partition(Cost(w, 2 * pp, floor), 3 * pp, min_size)]


def with_differences(x, gap=10):
    """Tried in the tenth round and left out: the default's changes plus those of the `'level'`
    model run on the first differences (changes of slope and of the increments' spread, as in a
    random walk with drift), at least `gap` samples from every change already kept."""
    out = list(detect(x))
    for c in detect(np.diff(np.asarray(x, float)), model="level"):
        if all(abs(c - o) > gap for o in out):
            out.append(c)
    return sorted(out)


def jumps(x, alpha=0.001, half=5, persist=5, min_size=5, jump_process=3.0):
    """Tried in the eleventh round and left out: single-sample jumps. A first difference of the
    prepared series is a jump when it departs from the running median of its `2 * half`
    neighbours by more than the Bonferroni bound `Phi^-1(1 - alpha / 2 / (n - 1))` in units of
    the RMS of all such departures, and the level `persist` samples after it stays on the side
    of the jump (at least half its size): a step in a curve, not a spike. A series whose RMS
    departure is more than `jump_process` times its trimmed scale jumps as a matter of course
    (the bank series' sawtooth) and gets none."""
    from scipy.stats import norm
    x = np.asarray(x, float)
    n = len(x)
    if n < 2 * min_size or np.all(x == x[0]):
        return []
    z, _ = prepare(x)
    d = np.diff(z)
    local = np.array([np.median(np.r_[d[max(0, i - half):i], d[i + 1:i + half + 1]]) for i in range(len(d))])
    r = d - local
    rms = float(np.sqrt(np.mean(r * r)))
    if not tscale(r) > 0 or rms > jump_process * tscale(r):
        return []
    out = []
    for i in np.argsort(-np.abs(r)):
        if abs(r[i]) <= norm.isf(alpha / 2 / len(d)) * rms:
            break
        c = int(i) + 1
        shift = np.median(z[c:c + persist]) - np.median(z[max(0, c - persist):c])
        if min_size <= c <= n - min_size and shift * d[i] > 0 and abs(shift) >= 0.5 * abs(d[i]) \
                and all(abs(c - o) >= min_size for o in out):
            out.append(c)
    return sorted(out)


def with_jumps(x, **kw):
    """The default's changes plus the jumps at least 5 samples from each of them."""
    out = list(detect(x))
    for c in jumps(x, **kw):
        if all(abs(c - o) >= 5 for o in out):
            out.append(c)
    return sorted(out)


def two_seasons(fn, reps=20, n=600):
    """A synthetic suite fixed before its results were seen: two sine cycles `p1 < p2` (periods
    (8, 50), (12, 90), (20, 160), (24, 168), (10, 100), (7, 60); amplitudes (1.5, 1.5), (1.5,
    0.75), (0.75, 1.5); random phases), Gaussian noise of sd 0.7, with a level shift of 3 at
    0.65 n or without. Returns the share of shifted series where the shift is found alone
    (within 3 samples) and the mean number of changes on the series without a shift."""
    rng = np.random.default_rng(11)
    alone = nulls = total = 0
    for p1, p2 in [(8, 50), (12, 90), (20, 160), (24, 168), (10, 100), (7, 60)]:
        for a1, a2 in [(1.5, 1.5), (1.5, 0.75), (0.75, 1.5)]:
            for _ in range(reps):
                i = np.arange(n)
                base = (a1 * np.sin(2 * np.pi * i / p1 + rng.uniform(0, 2 * np.pi))
                        + a2 * np.sin(2 * np.pi * i / p2 + rng.uniform(0, 2 * np.pi)) + rng.normal(0, 0.7, n))
                at = int(0.65 * n)
                shifted = base.copy()
                shifted[at:] += 3
                c = fn(shifted)
                alone += len(c) == 1 and abs(c[0] - at) <= 3
                nulls += len(fn(base))
                total += 1
    return f"two seasons: shift found alone {alone / total:.3f}, changes without a shift {nulls / total:.2f}"


def synthetic(fn, reps=20, seed=1):
    rng = np.random.default_rng(seed)

    def ar(n, phi):
        e = rng.normal(size=n)
        x = np.zeros(n)
        for i in range(1, n):
            x[i] = phi * x[i - 1] + e[i]
        return x

    def mean_changes(gen):
        return np.mean([len(fn(gen())) for _ in range(reps)])

    def alone(gen, at):
        hits = 0
        for _ in range(reps):
            c = fn(gen())
            hits += len(c) == 1 and abs(c[0] - at) <= 3
        return hits / reps

    out = {
        "white 1000": mean_changes(lambda: rng.normal(size=1000)),
        "walk 600": mean_changes(lambda: np.cumsum(rng.normal(size=600))),
        "walk 40": mean_changes(lambda: np.cumsum(rng.normal(size=40))),
        "AR(0.7) 500": mean_changes(lambda: ar(500, 0.7)),
        "AR(0.7) 40": mean_changes(lambda: ar(40, 0.7)),
        "trend 200": mean_changes(lambda: 0.05 * np.arange(200) + rng.normal(size=200)),
        "step 3 sd, n 30 (found alone)": alone(lambda: np.r_[rng.normal(size=15), 3 + rng.normal(size=15)], 15),
        "kink, n 40 (found alone)": alone(
            lambda: np.r_[np.zeros(20), 0.5 * np.arange(20)] + 0.5 * rng.normal(size=40), 20),
        "AR(0.7) + step, n 400 (found alone)": alone(
            lambda: ar(400, 0.7) + np.r_[np.zeros(200), 4 * np.ones(200)], 200),
    }
    return ", ".join(f"{k}: {v:.2f}" for k, v in out.items())


def tune_and_qc(series):
    """(name, group, series) of the tune-half (`"tune"`) and quality-control (`"qc"`) series;
    the eval half is never returned, so nothing built on this can score it."""
    for name, s in series.items():
        g = "qc" if tcpd.family(name) == "synthetic" else tcpd.half(name)
        if g in ("tune", "qc"):
            yield name, g, s


def changes(fn, raw):
    """`fn`'s changes of a series with NaN gaps, as indexes into the series with them."""
    keep = np.flatnonzero(np.isfinite(raw))
    return [int(keep[c]) for c in fn(raw[keep])]


def score(series, fn):
    groups = {"tune": [], "qc": []}
    for _, g, s in tune_and_qc(series):
        cps = changes(fn, s["values"])
        groups[g].append((tcpd.f1(s["annotations"], cps), tcpd.cover(s["annotations"], cps, len(s["values"]))))
    return "  ".join(f"{g} F1 {np.mean([r[0] for r in v]):.3f} cover {np.mean([r[1] for r in v]):.3f}"
                     for g, v in groups.items())


def per_series(series, fn):
    """Per-series F1 and changes on the tune half and quality-control series only."""
    return {name: (tcpd.f1(s["annotations"], cps), cps)
            for name, _, s in tune_and_qc(series) for cps in [changes(fn, s["values"])]}


def run_methods(series, methods, names, big=False):
    """The experiment rounds' driver: for each method named, the TCPD tune-half and
    quality-control scores, the synthetic suite and the two-season suite (3 repetitions), then
    a per-series table; with `big`, only the synthetic suite at 60 repetitions, seed 2."""
    tables = {}
    for label in names:
        fn = methods[label]
        t0 = time.time()
        if big:
            print(f"{label}\n  synthetic 60 reps seed 2: {synthetic(fn, reps=60, seed=2)}"
                  f"\n  ({time.time() - t0:.0f} s)", flush=True)
            continue
        print(f"{label}\n  TCPD {score(series, fn)}\n  synthetic: {synthetic(fn)}"
              f"\n  {two_seasons(fn, reps=3)}\n  ({time.time() - t0:.0f} s)", flush=True)
        tables[label] = per_series(series, fn)
    if not tables:
        return
    print("\nper series (tune half and quality control only): F1 [changes]")
    for name in tables[names[0]]:
        print(f"{name:22s}" + "  ".join(f"{label} {tables[label][name][0]:.2f} {tables[label][name][1]}"
                                         for label in names))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    series, _ = tcpd.load(sys.argv[1])
    experiments = {
        "first version: 1.5 * ln n * VIF": lambda x: detect(x, per_param=1.5, neff=False, vif_fn=None),
        "cp2: 2 * ln(n / VIF) * VIF": lambda x: detect(x, vif_fn=None),
        "default (cp3): cp2 and the differences' VIF on smooth curves": lambda x: detect(x),
        "1.75 * ln(n / VIF) * VIF": lambda x: detect(x, per_param=1.75),
        "2.25 * ln(n / VIF) * VIF": lambda x: detect(x, per_param=2.25),
        "default, rho clamp 0.9": lambda x: detect(x, max_rho=0.9),
        "left out: rho from residuals of a first pass": two_pass,
        "left out: extra VIF when smoother than a walk": lambda x: detect(x, vif_fn=smoother_than_walk),
        "left out: the differences' VIF from rho_diff > 1": lambda x: detect(
            x, vif_fn=lambda v, n, z: second_order(v, n, z) if lag1(np.diff(z)) > 1 else v),
        "left out: min segment max(5, n / 20)": lambda x: detect(x, min_size=max(5, len(x) // 20)),
        "left out: residual variance floor 0.05 (noise units)": lambda x: detect(x, var_floor=0.05),
        "left out: season search, trough-to-peak drop 0.5": lambda x: detect(x, season_drop=0.5),
        "round 10, left out: variance prior, 2 pseudo-samples": lambda x: detect(x, cost_cls=PriorCost),
        "round 10, left out: slope 1.5 parameters": lambda x: detect(x, slope_params=1.5),
        "round 10, left out: slope 3 parameters": lambda x: detect(x, slope_params=3.0),
        "round 10, left out: prewhitened (AR1seg-like)": prewhitened,
        "round 10, left out: and the differences' level changes": with_differences,
        "round 10, left out: up to 3 seasons, strongest first": lambda x: detect(x, seasons=3),
        "round 11, left out: and single-sample jumps": with_jumps,
        "round 11, left out: and single-sample jumps, no jump-process guard": lambda x: with_jumps(
            x, jump_process=np.inf),
    }
    for label, fn in experiments.items():
        print(f"{label}\n  TCPD {score(series, fn)}\n  synthetic: {synthetic(fn)}", flush=True)
    for label, fn in [("default", detect), ("up to 3 seasons", lambda x: detect(x, seasons=3)),
                      ("up to 3 seasons, drop 0.5", lambda x: detect(x, seasons=3, season_drop=0.5))]:
        print(f"{label}: {two_seasons(fn)}", flush=True)


if __name__ == "__main__":
    main()
