#!/usr/bin/env python3
"""Round 12: two method classes other than penalised likelihood, for experiments on the tune half.

  benches/changepoints_round12.py TCPD_DIR [METHOD ...]

Same protocol as `changepoints_model.py`: prints TCPD tune-half and quality-control F1 / cover
(through `changepoints_model.score`, which never scores the eval half), the synthetic suite and
a per-series table of the tune half and the quality-control series only.

(a) `bayes`: exact Bayesian product-partition model (Fearnhead 2006). Segments are independent
    given the partition; the prior on the partition is a geometric segment length with hazard
    `1 / n` (one change expected a priori), at least `min_size` samples per segment. Each
    segment's marginal likelihood is conjugate (normal-inverse-gamma, so the noise variance and
    the coefficients are integrated out) and averaged over segment models with equal prior
    weight:
      flat  iid noise around a level
      line  iid noise around a line
      walk  a random walk with drift (first sample at a level, increments iid around a drift)
      ar    increments iid around a drift plus psi * (lagged value - its segment mean): AR(1)
            around a level (psi = phi - 1), nests `walk` (psi = 0) and `flat` (psi = -1)
    Forward-backward recursions give the posterior probability of a change at each sample; a
    change is reported where the posterior mass within +-5 samples exceeds 0.5 (greedy: the
    window with the most mass first, reported at its most probable sample, its mass removed).
    Serial correlation is modelled inside the segments (`walk`, `ar`), not by a VIF. Variant
    `bayes_vif`: only `flat` and `line`, the likelihood tempered by the default's VIF (power
    likelihood `1 / VIF`), i.e. the default's model with a posterior-mass decision rule.
    Priors, fixed a priori, in the robust noise units of `prepare`: sigma^2 ~ IG(1, 1); level
    ~ N(0, sigma^2 (var z + 1)); slope over the whole series ~ N(0, sigma^2 12 (var z + 1)) (a
    line across the series has the data's variance); drift ~ N(0, sigma^2 (var dz + 1)); psi ~
    N(0, sigma^2 / 4).

(c) `consensus`: the default's changes that appear (within +-5 samples) in the optimal
    segmentation at a majority of five penalty scales 1/2, 1/sqrt 2, 1, sqrt 2, 2, plus
    changes found at a majority of the scales even when the scale-1 solution lacks them.
"""
import os
import sys

import numpy as np
from scipy.special import gammaln, logsumexp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import changepoints_model as cm  # noqa: E402
import changepoints_tcpd as tcpd  # noqa: E402

LN2PI = np.log(2 * np.pi)


def _vif(z, max_rho=0.8):
    n = len(z)
    rho = cm.lag1(z)
    rho = min(max(rho, 0.0), max_rho) if np.isfinite(rho) else max_rho
    return cm.second_order((1 + rho) / (1 - rho), n, z)


class Segments:
    """Log marginal likelihoods of the segment models, vectorised over the segment start."""

    def __init__(self, z, models=("flat", "line", "walk", "ar"), temper=1.0, a0=1.0, b0=1.0, psi_var=0.25):
        n = len(z)
        self.n, self.z, self.models, self.w = n, z, models, temper
        self.a0, self.b0 = a0, b0
        vz = float(np.var(z)) + 1.0
        d = np.diff(z)
        self.v_level = vz
        self.v_slope = 12.0 * vz
        self.v_drift = float(np.var(d)) + 1.0 if n > 1 else 1.0
        self.v_psi = psi_var
        u = np.arange(n) / n
        cs = lambda v: np.concatenate([[0.0], np.cumsum(v)])  # noqa: E731
        self.P = dict(u=cs(u), uu=cs(u * u), z=cs(z), zz=cs(z * z), uz=cs(u * z))
        # increments: index i >= 1 holds d_i = z_i - z_{i-1} and the lag l_i = z_{i-1}
        dd = np.r_[0.0, d]
        ll = np.r_[0.0, z[:-1]]
        self.P.update(d=cs(dd), dsq=cs(dd * dd), l=cs(ll), ll=cs(ll * ll), ld=cs(ll * dd))

    def _ml(self, M, yy, qs, rs, vs):
        """Conjugate NIG log marginal likelihood with a diagonal X'X (qs) and prior (vs)."""
        w = self.w
        M, yy = M / w, yy / w
        half_logdet = 0.0
        fit = 0.0
        for q, r, v in zip(qs, rs, vs):
            lam = q / w + 1.0 / v
            half_logdet = half_logdet + 0.5 * (-np.log(v) - np.log(lam))
            fit = fit + (r / w) ** 2 / lam
        an = self.a0 + M / 2
        bn = self.b0 + 0.5 * np.maximum(yy - fit, 0.0)
        return (-M / 2 * LN2PI + half_logdet + self.a0 * np.log(self.b0) - an * np.log(bn)
                + gammaln(an) - gammaln(self.a0))

    def logml(self, s, t):
        P = self.P
        m = (t - s).astype(float)
        g = lambda k: P[k][t] - P[k][s]  # noqa: E731
        out = []
        sz, szz = g("z"), g("zz")
        if "flat" in self.models:
            out.append(self._ml(m, szz, [m], [sz], [self.v_level]))
        if "line" in self.models:
            su, suu, suz = g("u"), g("uu"), g("uz")
            cu = su / m
            out.append(self._ml(m, szz, [m, suu - su * cu], [sz, suz - cu * sz], [self.v_level, self.v_slope]))
        if "walk" in self.models or "ar" in self.models:
            zs = self.z[s]
            # increments of rows s+1 .. t-1
            k = m - 1
            sd = P["d"][t] - P["d"][s + 1]
            sdd = P["dsq"][t] - P["dsq"][s + 1]
            yy = zs * zs + sdd
            if "walk" in self.models:
                out.append(self._ml(m, yy, [np.ones_like(m), k], [zs, sd], [self.v_level, self.v_drift]))
            if "ar" in self.models:
                sl = P["l"][t] - P["l"][s + 1]
                sll = P["ll"][t] - P["ll"][s + 1]
                sld = P["ld"][t] - P["ld"][s + 1]
                lb = sl / k
                qll = np.maximum(sll - sl * lb, 0.0)
                out.append(self._ml(m, yy, [np.ones_like(m), k, qll], [zs, sd, sld - lb * sd],
                                    [self.v_level, self.v_drift, self.v_psi]))
        out = np.array(out)
        return logsumexp(out, axis=0) - np.log(len(out))


def posterior(x, models=("flat", "line", "walk", "ar"), temper=None, hazard=None, min_size=5, prep=True):
    """Posterior probability of a change at each position 1 .. n-1 (index = first sample of the
    new segment); returns (prob array of length n + 1, prepared series)."""
    x = np.asarray(x, float)
    n = len(x)
    z = cm.prepare(x)[0] if prep else x
    w = 1.0 if temper is None else (temper(z) if callable(temper) else temper)
    seg = Segments(z, models, temper=w)
    p = hazard if hazard is not None else 1.0 / n
    lp, lq = np.log(p), np.log1p(-p)
    L = np.full((n + 1, n + 1), -np.inf)  # L[s, t]: segment [s, t)
    for t in range(min_size, n + 1):
        s = np.arange(0, t - min_size + 1)
        L[s, t] = seg.logml(s, t)
    idx = np.arange(n + 1)
    lenmat = idx[None, :] - idx[:, None]  # t - s
    with np.errstate(invalid="ignore"):
        inner = L + lp + (lenmat - 1) * lq  # a segment followed by a change
        final = L[:, n] + (lenmat[:, n] - 1) * lq  # the last segment
    A = np.full(n + 1, -np.inf)
    A[0] = 0.0
    for t in range(min_size, n):
        A[t] = logsumexp(A[:t] + inner[:t, t])
    B = np.full(n + 1, -np.inf)
    for s in range(n - min_size, -1, -1):
        B[s] = np.logaddexp(final[s], logsumexp(inner[s, s + 1:n] + B[s + 1:n]) if s + 1 < n else -np.inf)
    Z = B[0]
    prob = np.exp(A + B - Z)
    prob[0] = prob[n] = 0.0
    return np.nan_to_num(prob), z


def map_partition(x, models=("flat", "line"), temper=None, hazard=None, min_size=5):
    """The most probable partition (MAP) under the same model, for attribution: the segment
    costs of the Bayesian model with the penalised-likelihood decision rule."""
    x = np.asarray(x, float)
    n = len(x)
    if n < 2 * min_size or np.all(x == x[0]):
        return []
    z = cm.prepare(x)[0]
    w = 1.0 if temper is None else (temper(z) if callable(temper) else temper)
    seg = Segments(z, models, temper=w)
    p = hazard if hazard is not None else 1.0 / n
    lp, lq = np.log(p), np.log1p(-p)
    f = np.full(n + 1, -np.inf)
    f[0] = 0.0
    prev = np.zeros(n + 1, int)
    for t in range(min_size, n + 1):
        s = np.arange(0, t - min_size + 1)
        v = f[s] + seg.logml(s, t) + (t - s - 1) * lq + (lp if t < n else 0.0)
        i = int(np.argmax(v))
        f[t], prev[t] = v[i], s[i]
    cps, t = [], n
    while t > 0:
        t = prev[t]
        if t > 0:
            cps.append(int(t))
    return sorted(cps)


def mass_rule(prob, half=5, level=0.5):
    """Greedy: the +-half window with the largest posterior mass above `level`, reported at its
    most probable sample; that window's probability is then removed."""
    prob = prob.copy()
    out = []
    k = np.ones(2 * half + 1)
    while True:
        W = np.convolve(prob, k, mode="same")
        c = int(np.argmax(W))
        if W[c] <= level:
            break
        lo, hi = max(0, c - half), min(len(prob), c + half + 1)
        at = lo + int(np.argmax(prob[lo:hi]))
        out.append(at)
        prob[lo:hi] = 0.0
    return sorted(out)


def bayes(x, models=("flat", "line", "walk", "ar"), temper=None, hazard=None, level=0.5, min_size=5):
    x = np.asarray(x, float)
    if len(x) < 2 * min_size or np.all(x == x[0]):
        return []
    prob, _ = posterior(x, models, temper, hazard, min_size)
    return mass_rule(prob, level=level)


def bayes_vif(x, **kw):
    return bayes(x, models=("flat", "line"), temper=_vif, **kw)


def _dvif(z, max_rho=0.8):
    """The VIF of the increments' own lag-1 autocorrelation (what `walk` and `ar` leave)."""
    if len(z) < 10 or not cm.tscale(np.diff(np.diff(z))) > 0:
        return 1.0
    r = cm.lag1(np.diff(z))
    r = min(max(r, 0.0), max_rho) if np.isfinite(r) else max_rho
    return (1 + r) / (1 - r)


def bayes_dvif(x, **kw):
    return bayes(x, temper=_dvif, **kw)


def bayes_vif_map(x):
    return map_partition(x, temper=_vif)


def bayes_vif2(x, **kw):
    """The likelihood tempered by 2 VIF: the default's 2 ln(n / VIF) VIF per parameter is twice
    BIC's, so this matches its strictness."""
    return bayes(x, models=("flat", "line"), temper=lambda z: 2 * _vif(z), **kw)


def bayes_all_vif(x, **kw):
    return bayes(x, temper=_vif, **kw)


def consensus(x, scales=(0.5, 2 ** -0.5, 1.0, 2 ** 0.5, 2.0), half=5):
    runs = [cm.detect(x, scale=s) for s in scales]
    need = len(runs) // 2 + 1
    votes = lambda c: sum(any(abs(c - o) <= half for o in r) for r in runs)  # noqa: E731
    out = [c for c in runs[len(runs) // 2] if votes(c) >= need]
    for r in runs:
        for c in r:
            if votes(c) >= need and all(abs(c - o) > half for o in out):
                out.append(c)
    return sorted(out)


METHODS = {
    "default": cm.detect,
    "bayes": bayes,
    "bayes_vif": bayes_vif,
    "consensus": consensus,
    "bayes_dvif": bayes_dvif,
    "bayes_vif_map": bayes_vif_map,
    "bayes_vif2": bayes_vif2,
    "bayes_all_vif": bayes_all_vif,
    # sensitivity of bayes_vif to its a-priori constants (not for choosing them)
    "bayes_vif_h0.5": lambda x: bayes_vif(x, hazard=0.5 / len(x)),
    "bayes_vif_h2": lambda x: bayes_vif(x, hazard=2.0 / len(x)),
    "bayes_vif_p0.7": lambda x: bayes_vif(x, level=0.7),
}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    series, _ = tcpd.load(sys.argv[1])
    names = sys.argv[2:] or list(METHODS)
    cm.run_methods(series, METHODS, names)


if __name__ == "__main__":
    main()
