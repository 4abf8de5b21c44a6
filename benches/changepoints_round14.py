#!/usr/bin/env python3
"""Round 14: a principled combination of the default and the DeCAFS-like model (round 13).

  benches/changepoints_round14.py TCPD_DIR [METHOD ...]   (METHOD `choices`: which model the
                                                            BIC selection picks, per series)

Same protocol as `changepoints_round13.py` (tune half, quality control, synthetic and
two-season suites only, through `changepoints_model.score`; the eval half is never scored).

(1) `select` (left out): the default's answer and `decafs_drift_c1`'s, each scored by its
    Gaussian nll under its own model plus BIC's 0.5 ln n per parameter (every parameter
    counted), the lower one reported. The default's model made explicit: its lines (OLS,
    `Cost.fit`) in AR(1) noise, phi global (lag-1 regression of the residuals within segments),
    each segment its own innovation variance (MLE given phi, floored like the default's);
    parameters: level and variance per segment (+1 per slope), a location per change, phi.
    DeCAFS: the exact Kalman nll of its segments; level per segment (+1 per drift), a location
    per change, s_eta^2, s_nu^2, phi. It picks the default on 17 of 19 tune/QC series (its own
    variance per segment and the floored zero run of CO2 Canada win by far) and DeCAFS on the
    bank sawtooth, the one series where DeCAFS is wrong: likelihood cannot replace the guard.

(2) `decafs_two_bonf_test` (the round's candidate), DeCAFS with drift (round 13) and three
    changes, each fixing one flaw:
    - parameters: two moment estimates of (s_eta^2, s_nu^2, phi) compete, round 13's (from the
      series) and `resid_estimate` (the same fit on the residuals of the default's
      piecewise-linear fit, lag-k pairs inside one default segment only: a ramp the default
      fitted does not pass for a random walk). Each segments the series; the lower penalised
      cost wins (profile likelihood over the nuisance parameters; same model and parameter
      count, so no extra penalty). Fixes kinks (0/20 -> 19/20).
    - penalty per change: the Bonferroni threshold of the likelihood-ratio test of one jump at
      an unknown one of n - 1 locations, 0.5 chi2_1.isf(ALPHA / (n - 1)) in nll units, ALPHA =
      0.05 fixed before it was run (about one false change in 20 null series); a drift stays
      BIC's 0.5 ln n. (BIC's ln n per change lets about 1 / sqrt(pi ln n) false changes
      through per null series: 0.3 at n = 40.) Fixes short null series and QC series 3.
    - `adequate` instead of round 13's guard: the best model of the family (fitted to the
      lag-k robust variances, k = 1 .. 15, in standardised relative error) must stay within
      the two-sided Bonferroni bound at ADEQUACY_LEVEL = 0.001 over the K lags of every
      v_k, with se(ln v_k) = 2.33 sqrt(k / (n - k)) (a MAD's sampling error on n / k
      effectively independent lag-k differences, the walk's -- most dependent -- case);
      else the default's answer. Rejects the bank (33 se) and US population (7.6 se; the same
      answer either way), nothing else on the tune/QC series (businv is closest, 3.7 against
      3.99) and nothing synthetic.
    Left out on top: `_scale` (an optional own variance scale per segment, for spread
    changes such as Shanghai's), `decafs_three_bonf_test` (a third estimate with s_eta = 0).

Results (2026-12-06; tune F1 / cover; QC F1; null changes walk 600 / walk 40 / AR(0.7) 40;
found alone step / kink / AR + step; two-season nulls):
  default                      0.749 / 0.735; 0.865; 1.55 / 0.15 / 0.10; 0.75 / 1.00 / 1.00; 0.87
  decafs_drift_c1_guard (r13)  0.829 / 0.738; 0.837; 0.30 / 0.35 / 0.20; 0.80 / 0.00 / 0.90; 0.43
  select                       0.689 / 0.675; 0.865; 0.90 / 0.20 / 0.10; 0.75 / 1.00 / 1.00; 0.28
  decafs_resid_c1_guard        0.803 / 0.724; 0.802; 1.10 / 0.55 / 0.20; 0.80 / 0.95 / 1.00; 0.52
  decafs_two_c1_test           0.861 / 0.757; 0.837; 0.25 / 0.45 / 0.20; 0.85 / 0.95 / 0.95; 0.43
  decafs_two_bonf_test         0.811 / 0.723; 0.897; 0.20 / 0.10 / 0.05; 0.75 / 0.95 / 1.00; 0.33
  decafs_resid_bonf_test       0.822 / 0.732; 0.862; 0.70 / 0.30 / 0.15; 0.80 / 0.95 / 1.00; 0.43
  decafs_two_bonf_test_scale   0.751 / 0.658; 0.794; 0.25 / 0.10 / 0.05; 0.75 / 0.95 / 1.00; 0.44
  sensitivity (not for choosing): ALPHA 0.01: 0.802 / 0.723; 0.866; 0.10 / 0.00 / 0.00;
  0.70 / 1.00 / 0.80; ALPHA 0.2: 0.827 / 0.735; 0.871; 0.25 / 0.40 / 0.15; 0.85 / 0.95 / 0.95;
  ADEQUACY_LEVEL 0.01: 0.801 (businv rejected), 1e-5: unchanged.
  Synthetic suite again with 60 repetitions, seed 2: default 1.78 / 0.08 / 0.05, 0.72 / 0.97 /
  0.92; decafs_drift_c1_guard 0.37 / 0.25 / 0.15, 0.77 / 0.03 / 0.93; decafs_two_bonf_test
  0.22 / 0.20 / 0.05, 0.77 / 0.90 / 0.93 (kinks below the default's: on 40 samples the
  residual-based estimate is noisy and a DeCAFS change spends a free level, so a kink is
  placed more loosely).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import changepoints_model as cm  # noqa: E402
import changepoints_round13 as r13  # noqa: E402
import changepoints_tcpd as tcpd  # noqa: E402

LN2PI = np.log(2 * np.pi)
ALPHA = 0.05  # Bonferroni level of a false change per series (fixed before any run)
ADEQUACY_LEVEL = 0.001  # level of the model-adequacy test that replaces round 13's guard


# ------------------------------------------------------------------------------ the default
def default_fit(x, min_size=5):
    """The default's changes and its prepared series / cost object."""
    x = np.asarray(x, float)
    n = len(x)
    z, floor = cm.prepare(x)
    rho = cm.lag1(z)
    rho = min(max(rho, 0.0), 0.8) if np.isfinite(rho) else 0.8
    vif = cm.second_order((1 + rho) / (1 - rho), n, z)
    pp = 2.0 * np.log(max(n / vif, 2.0)) * vif
    cost = cm.Cost(z, 2 * pp, floor)
    cps = cm.opt_partition(cost, 3 * pp, min_size)
    return z, floor, cost, cps


def default_criterion(z, floor, cost, cps, mult=1.0):
    """nll + mult * 0.5 ln n * k of the default's segmentation, as lines in AR(1) noise."""
    n = len(z)
    b = [0] + list(cps) + [n]
    res, k = [], 1  # phi
    for a, e in zip(b, b[1:]):
        sl, ic, _ = cost.fit(a, e)
        res.append(z[a:e] - (ic + sl * np.arange(a, e) / n))
        k += 2 + (sl != 0.0)
    k += len(cps)
    num = sum(float(r[1:] @ r[:-1]) for r in res)
    den = sum(float(r[:-1] @ r[:-1]) for r in res)
    phi = float(np.clip(num / den, -0.99, 0.999)) if den > 0 else 0.0
    w = 1 - phi * phi
    nll = 0.0
    for r in res:
        m = len(r)
        u2 = r[0] ** 2 * w + float(((r[1:] - phi * r[:-1]) ** 2).sum())
        s2 = max(u2 / m, floor)
        nll += 0.5 * m * (LN2PI + np.log(s2)) + 0.5 * u2 / s2 - 0.5 * np.log(w)
    return nll + mult * 0.5 * np.log(n) * k


# ------------------------------------------------------------------------------ DeCAFS
def decafs_fit(z, floor, params, c=1.0, min_size=5):
    """DeCAFS with optional drift: (changes, nll, number of parameters)."""
    n = len(z)
    eta2, nu2, phi = params
    if eta2 + nu2 <= floor:
        nu2 = floor
    per_param = c * 0.5 * np.log(n)
    C0 = r13.cost_matrix(z, eta2, nu2, phi, False, floor)
    C1 = r13.cost_matrix(z, eta2, nu2, phi, True, floor)
    C = np.minimum(C0, C1 + per_param)
    cps = r13.partition(C, 2 * per_param, min_size)
    b = [0] + cps + [n]
    nll, k = 0.0, 3 + len(cps)  # s_eta^2, s_nu^2, phi; a location per change
    for a, e in zip(b, b[1:]):
        drift = C1[a, e] + per_param < C0[a, e]
        nll += C1[a, e] if drift else C0[a, e]
        k += 1 + drift
    return cps, nll, k, (eta2, nu2, phi)


def seg_nll(z, cps, params, floor):
    """The DeCAFS nll of a fixed segmentation (each segment flat or drifting, whichever is
    better by BIC), for the maximum-likelihood refit of the parameters."""
    eta2, nu2, phi = params
    n = len(z)
    b = [0] + list(cps) + [n]
    tot = 0.0
    for a, e in zip(b, b[1:]):
        seg = z[a:e]
        c0 = r13.cost_matrix(seg, eta2, nu2, phi, False, floor)[0, -1]
        c1 = r13.cost_matrix(seg, eta2, nu2, phi, True, floor)[0, -1] + 0.5 * np.log(n)
        tot += min(c0, c1)
    return tot


def mle_params(z, cps, start, floor):
    from scipy.optimize import minimize
    eta2, nu2, phi = start

    def f(p):
        e, v, ph = np.exp(p[0]), np.exp(p[1]), np.tanh(p[2])
        return seg_nll(z, cps, (e, v, ph), floor)

    p0 = [np.log(max(eta2, 1e-4)), np.log(max(nu2, 1e-4)), np.arctanh(np.clip(phi, -0.98, 0.98))]
    r = minimize(f, p0, method="Nelder-Mead", options=dict(maxiter=120, xatol=1e-2, fatol=1e-2))
    return float(np.exp(r.x[0])), float(np.exp(r.x[1])), float(np.tanh(r.x[2]))


def decafs_criterion(nll, k, n, mult=1.0):
    return nll + mult * 0.5 * np.log(n) * k


# ------------------------------------------------------------------------------ parameters from the default's residuals
def resid_estimate(z, cost, cps, K=15, phis=np.linspace(0.0, 0.99, 100), no_eta=False):
    """round 13's moment estimate of (s_eta^2, s_nu^2, phi), from the residuals of the
    default's piecewise-linear fit and lag-k pairs inside one default segment only: a ramp or a
    kink the default has fitted does not pass for local fluctuations, and neither do its level
    shifts; whatever the default's lines leave (curvature, a walk, jumps it did not take) does."""
    n = len(z)
    b = [0] + list(cps) + [n]
    r = np.empty(n)
    seg = np.empty(n, int)
    for j, (a, e) in enumerate(zip(b, b[1:])):
        sl, ic, _ = cost.fit(a, e)
        r[a:e] = z[a:e] - (ic + sl * np.arange(a, e) / n)
        seg[a:e] = j
    K = max(2, min(K, n // 4))
    ks = np.arange(1, K + 1)
    v = []
    for k in ks:
        same = seg[k:] == seg[:-k]
        d = (r[k:] - r[:-k])[same]
        v.append(r13.mad_var(d) if len(d) >= 5 else np.nan)
    v = np.array(v)
    ok = np.isfinite(v)
    ks, v = ks[ok], v[ok]
    best = (np.inf, 0.0, 0.0, 0.0)
    for phi in phis:
        a = ks.astype(float)
        bb = 2 * (1 - phi ** ks)
        X = np.c_[a, bb]
        coef, *_ = np.linalg.lstsq(X, v, rcond=None)
        if no_eta:
            coef = np.array([0.0, max((bb @ v) / (bb @ bb), 0.0)])
        elif coef[0] < 0 or coef[1] < 0:
            cands = [(max((a @ v) / (a @ a), 0.0), 0.0), (0.0, max((bb @ v) / (bb @ bb), 0.0))]
            coef = np.array(min(cands, key=lambda c: float(((X @ np.array(c)) - v) @ ((X @ np.array(c)) - v))))
        res = X @ coef - v
        sse = float(res @ res)
        if sse < best[0] - 1e-12:
            best = (sse, float(coef[0]), float(coef[1]), float(phi))
    _, eta2, e2, phi = best
    return eta2, e2 * (1 - phi * phi), phi


def decafs_resid(x, c=1.0, guard=r13.GUARD, min_size=5):
    """DeCAFS with drift, its parameters from the default's residuals (`resid_estimate`);
    `guard`: round 13's misfit guard (on the parameters as round 13 estimates them)."""
    x = np.asarray(x, float)
    n = len(x)
    if n < 2 * min_size or np.all(x == x[0]):
        return []
    z, floor, cost, dcps = default_fit(x, min_size)
    if guard is not None and r13.misfit(z, r13.estimate(z)) > guard:
        return dcps
    p = resid_estimate(z, cost, dcps)
    return decafs_fit(z, floor, p, c, min_size)[0]


def change_penalty(n, c=1.0, alpha=None):
    """Per change, in -log-likelihood units: BIC's `c * 0.5 ln n` for each of 2 parameters, or
    with `alpha` the Bonferroni threshold of the likelihood-ratio test of one jump (1 degree of
    freedom) at an unknown one of n - 1 locations: 0.5 chi2_1.isf(alpha / (n - 1)), so that
    a series without a change gets a false one with probability about alpha."""
    if alpha is None:
        return 2 * c * 0.5 * np.log(n)
    from scipy.stats import chi2
    return 0.5 * float(chi2.isf(alpha / (n - 1), 1))


def decafs_fit_pen(z, floor, params, c=1.0, min_size=5, alpha=None, scale=False):
    """DeCAFS with drift: (changes, penalised cost = nll + penalties) for one parameter set.
    `scale`: a segment may also have its own variance scale (both variances times a profiled
    factor), one more parameter (BIC's 0.5 ln n), so a change of spread is one change."""
    n = len(z)
    eta2, nu2, phi = params
    if eta2 + nu2 <= floor:
        nu2 = floor
    per_param = c * 0.5 * np.log(n)
    C = np.minimum(r13.cost_matrix(z, eta2, nu2, phi, False, floor),
                   r13.cost_matrix(z, eta2, nu2, phi, True, floor) + per_param)
    if scale:
        C = np.minimum(C, r13.scaled_cost(z, eta2, nu2, phi, False, floor) + per_param)
        C = np.minimum(C, r13.scaled_cost(z, eta2, nu2, phi, True, floor) + 2 * per_param)
    return r13.partition(C, change_penalty(n, c, alpha), min_size, with_cost=True)


def adequacy(z, K=15, phis=np.linspace(0.0, 0.99, 100)):
    """How far the best model of the family misses the robust lag-k variances v_k, k = 1 .. K,
    in standard errors: min over (s_eta^2, s_e^2 >= 0, phi) of max_k |ln(fit_k / v_k)| / se_k.
    se_k = 2.33 sqrt(k / (n - k)) is the standard error of ln of a MAD-based variance (MAD's
    Gaussian efficiency 0.37: sd(ln sigma_hat) = 1.166 / sqrt(m)) with m = (n - k) / k
    independent differences (lag-k differences overlap; for a walk they carry about n / k
    samples' information, the most dependent case in the family, so the bound is
    conservative). The fit minimises the standardised relative errors (non-negative least
    squares on (fit_k - v_k) / (v_k se_k)) for each phi on round 13's grid."""
    from scipy.optimize import nnls
    n = len(z)
    K = max(2, min(K, n // 4))
    ks = np.arange(1, K + 1)
    v = np.array([r13.mad_var(z[k:] - z[:-k]) for k in ks])
    if np.any(v <= 0):
        return np.inf
    se = 2.33 * np.sqrt(ks / (n - ks))
    best = np.inf
    for phi in phis:
        A = np.c_[ks, 2 * (1 - phi ** ks)]
        c, _ = nnls(A / (v * se)[:, None], 1 / se)
        fit = A @ c
        if np.any(fit <= 0):
            continue
        best = min(best, float(np.max(np.abs(np.log(fit / v)) / se)))
    return best


def adequate(z, level=None, K=15):
    """The model family describes the lag-variance curve: `adequacy` within the two-sided
    Bonferroni bound at `level` (ADEQUACY_LEVEL) over the K lags."""
    from scipy.stats import norm
    n = len(z)
    K = max(2, min(K, n // 4))
    return adequacy(z, K) <= norm.isf((level or ADEQUACY_LEVEL) / (2 * K))


def decafs_two(x, c=1.0, guard=r13.GUARD, min_size=5, verbose=False, alpha=None, scale=False, level=None,
               three=False):
    """DeCAFS with drift under whichever of two parameter estimates (round 13's, from the
    series; `resid_estimate`, from the default's residuals) gives the lower penalised cost:
    the profile likelihood choosing between two estimates of the same nuisance parameters
    (same model, same parameter count, so no penalty term differs)."""
    x = np.asarray(x, float)
    n = len(x)
    if n < 2 * min_size or np.all(x == x[0]):
        return []
    z, floor, cost, dcps = default_fit(x, min_size)
    p0 = r13.estimate(z)
    if guard == "test":
        if not adequate(z, level):
            return dcps
    elif guard is not None and r13.misfit(z, p0) > guard:
        return dcps
    a = decafs_fit_pen(z, floor, p0, c, min_size, alpha, scale)
    b = decafs_fit_pen(z, floor, resid_estimate(z, cost, dcps), c, min_size, alpha, scale)
    if verbose:
        return ("series" if a[1] <= b[1] else "resid", round(a[1], 1), round(b[1], 1))
    best = a if a[1] <= b[1] else b
    if three:  # a third estimate: s_eta = 0 (lines in AR(1) noise), from the residuals
        d = decafs_fit_pen(z, floor, resid_estimate(z, cost, dcps, no_eta=True), c, min_size, alpha, scale)
        best = d if d[1] < best[1] else best
    return best[0]


def decafs_two_one(x, alpha=None, c=1.0, min_size=5):
    """Ablation: only the residual-based parameters (no choice between the two estimates)."""
    x = np.asarray(x, float)
    n = len(x)
    if n < 2 * min_size or np.all(x == x[0]):
        return []
    z, floor, cost, dcps = default_fit(x, min_size)
    if not adequate(z):
        return dcps
    return decafs_fit_pen(z, floor, resid_estimate(z, cost, dcps), c, min_size, alpha)[0]


# ------------------------------------------------------------------------------ selection
def select(x, c=1.0, d2=False, mle=False, mult=1.0, min_size=5, verbose=False):
    x = np.asarray(x, float)
    n = len(x)
    if n < 2 * min_size or np.all(x == x[0]):
        return []
    z, floor, cost, dcps = default_fit(x, min_size)
    cands = [(default_criterion(z, floor, cost, dcps, mult), "default", dcps)]
    orders = [1, 2] if d2 else [1]
    for order in orders:
        p = r13.estimate(z, order=order)
        cps, nll, k, p = decafs_fit(z, floor, p, c, min_size)
        if mle:
            for _ in range(2):
                p = mle_params(z, cps, p, floor)
                cps, nll, k, p = decafs_fit(z, floor, p, c, min_size)
        cands.append((decafs_criterion(nll, k, n, mult), f"decafs{order}", cps))
    best = min(cands, key=lambda r: r[0])
    if verbose:
        return best[1], [(round(float(v), 1), lab, len(cp)) for v, lab, cp in cands]
    return best[2]


METHODS = {
    "default": cm.detect,
    "decafs_drift_c1_guard": lambda x: r13.decafs(x, c=1.0, drift=True, guard=r13.GUARD),
    "decafs_resid_c1_guard": decafs_resid,
    "decafs_resid_c1": lambda x: decafs_resid(x, guard=None),
    "decafs_resid_c2_guard": lambda x: decafs_resid(x, c=2.0),
    "decafs_two_c1_guard": decafs_two,
    "decafs_two_c1": lambda x: decafs_two(x, guard=None),
    "decafs_two_bonf_guard": lambda x: decafs_two(x, alpha=ALPHA),
    "decafs_two_bonf_test": lambda x: decafs_two(x, alpha=ALPHA, guard="test"),
    "decafs_two_bonf_test_scale": lambda x: decafs_two(x, alpha=ALPHA, guard="test", scale=True),
    # sensitivity to the two levels (not for choosing them)
    "decafs_two_bonf0.01_test": lambda x: decafs_two(x, alpha=0.01, guard="test"),
    "decafs_two_bonf0.2_test": lambda x: decafs_two(x, alpha=0.2, guard="test"),
    "decafs_two_bonf_test0.01": lambda x: decafs_two(x, alpha=ALPHA, guard="test", level=0.01),
    "decafs_two_bonf_test1e-5": lambda x: decafs_two(x, alpha=ALPHA, guard="test", level=1e-5),
    "decafs_resid_bonf_test": lambda x: decafs_two_one(x, alpha=ALPHA),
    "decafs_three_bonf_test": lambda x: decafs_two(x, alpha=ALPHA, guard="test", three=True),
    "decafs_two_bonf": lambda x: decafs_two(x, alpha=ALPHA, guard=None),
    "decafs_two_c1_test": lambda x: decafs_two(x, guard="test"),
    "select": select,
    "select_c2": lambda x: select(x, c=2.0),
    "select3": lambda x: select(x, d2=True),
    "select_mle": lambda x: select(x, mle=True),
    "select_bic2": lambda x: select(x, mult=2.0),
}


def choices(series, **kw):
    """Which model the criterion picks on each tune-half and quality-control series."""
    for name, _, s in cm.tune_and_qc(series):
        raw = s["values"]
        print(f"  {name:22s}", select(raw[np.isfinite(raw)], verbose=True, **kw), flush=True)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    series, _ = tcpd.load(sys.argv[1])
    names = sys.argv[2:] or list(METHODS)
    for flag, kw in [("choices", {}), ("choices3", dict(d2=True)), ("choices_mle", dict(mle=True))]:
        if flag in names:
            print(flag)
            choices(series, **kw)
            names = [m for m in names if m != flag]
    cm.run_methods(series, METHODS, names)


if __name__ == "__main__":
    main()
