#!/usr/bin/env python3
"""Round 13: a state-space method class (DeCAFS-like) and a data-driven penalty, on the tune half.

  benches/changepoints_round13.py TCPD_DIR [METHOD ...]

Same protocol as `changepoints_model.py` and `changepoints_round12.py`: prints TCPD tune-half
and quality-control F1 / cover (through `changepoints_model.score`, which never scores the
eval half), the synthetic suite, the two-season suite (3 repetitions) and a per-series table
of the tune half and the quality-control series only. Every method runs on the default's
`prepare`d series (robust scale, winsorising against an 11-sample running median, season
removal), so outliers and seasons are handled as in the default.

(1) `decafs`: the model of DeCAFS (Romano, Rigaill, Runge & Fearnhead, "Detecting abrupt
    changes in the presence of local fluctuations and autocorrelated noise", JASA 2022):

        z[t] = mu[t] + e[t],   mu[t] = mu[t-1] + eta[t] (+ a jump at a change),
        e[t] = phi e[t-1] + nu[t],   eta ~ N(0, s_eta^2),  nu ~ N(0, s_nu^2).

    Parameters, once per series, as DeCAFS estimates them (its `estimateParameters`): for
    lags k = 1 .. 15 the robust variance v_k = (1.4826 MAD(z[t+k] - z[t]))^2 is fitted by
    least squares to k s_eta^2 + 2 s_e^2 (1 - phi^k), s_e^2 = s_nu^2 / (1 - phi^2), phi on a
    grid 0 .. 0.99, the two variances non-negative. Changes: exact optimal partitioning
    (O(n^2), no functional pruning) where a segment's cost is the exact Gaussian negative
    log-likelihood of its samples under the state-space model, by a Kalman filter whose level
    starts diffuse (the segment's first sample fixes it; e starts stationary). Because the
    filter's covariances depend only on the age of the segment, the gains are computed once
    and the filters of all segment starts run together (vectorised over starts). A diffuse
    start drops its sample's density; each segment is charged 0.5 ln(2 pi S_inf) per diffuse
    state (S_inf the steady-state innovation variance) so a change gains only what a free
    jump explains (the profile-likelihood normalisation), not a likelihood term for free.
    Penalty per change: `c * 0.5 ln n` per parameter (BIC's, in units of -log-likelihood),
    2 parameters (location, jump size); `c = 2` like the default's "2 per parameter" (twice
    BIC); DeCAFS' own `beta = 2 ln n` in units of -2 log-likelihood is `c = 1`. No VIF: the
    serial correlation is in the model.

    `decafs_drift`: the same with an optional constant drift inside a segment (the local level
    gets `+ b` per step, b diffuse per segment), `min(no drift, drift + c * 0.5 ln n)` per
    segment like the default's optional slope; a change of slope in a walk is then a change.
    The parameters are estimated as above (the lagged differences are median-centred, so a
    constant drift does not enter them).

    `decafs_c1`, `decafs_drift_c1`: DeCAFS' own penalty (c = 1), fixed a priori as the
    published default (`beta = 2 log n` on the -2 log-likelihood, 2 parameters per change).

    Variants on `decafs_drift_c1` (each one idea):
    `_guard`: model adequacy. The fitted model predicts the lag-1 variance
        s_eta^2 + 2 s_e^2 (1 - phi); when it misses the observed robust lag-1 variance by a
        factor over GUARD = 100 the model does not describe the series and the default's
        changes are reported instead. A constant read off one tune series (bank: a sawtooth of
        paydays, half of its increments exactly 0, misfit 7784; every other tune-half and
        quality-control series <= 10.6; GUARD = 10 gives the same results).
    `_select`: the same model with s_eta = 0 (AR(1) noise around piecewise levels or lines,
        parameters refitted with s_eta fixed at 0) competes; the lower penalised cost wins,
        s_eta costing one parameter.
    `decafs_scale_c1` (and `decafs_scale`, c = 2; `decafs_scale_c1_guard`): with drift and
        each segment its own variance scale (both variances times a profiled factor, a
        third parameter per change), like the default's own variance per segment.
    `_d2`: parameters from the lag-k second differences z[t+2k] - 2 z[t+k] + z[t] (variance
        2 k s_eta^2 + s_e^2 (6 - 8 phi^k + 2 phi^2k)), so that slopes do not pass for local
        fluctuations.
    `decafs_drift_c{0.75,1.25,1.5}_guard`, `_guard10`: sensitivity to c and GUARD, not for
        choosing them.

(2) `slope_heuristic`: the default's segment cost (flat or sloped line, own variance, the
    slope paid inside the cost as in the default), the best segmentation for every number of
    changes K = 0 .. K_max (segment neighbourhood DP), and the penalty
    pen(K) = kappa K (a + ln(n / K)) of Birge & Massart (a = 2, Lebarbier 2005's form up to
    the constant), kappa calibrated per series by the dimension jump (Baudry, Maugis & Michel
    2012, `capushe`'s DDSE / djump idea): kappa_min is where the selected K falls by the
    largest jump as kappa grows; the final penalty is 2 kappa_min. Automatic per series (no
    per-series human choice). K_max = min(n / 10, 40).

(3) Combinations (each a rule, no constant beyond the parents'):
    `default_or_decafs`: the default's changes plus DeCAFS' jumps (c = 2) at least 5 samples
    from each of them (a jump is a change the sloped default segment may absorb);
    `default_or_decafs_c1_guard`: the same with `decafs_drift_c1_guard`;
    `default_and_decafs`: the default's changes that DeCAFS with drift (c = 2) also finds
    within 5 samples.

Results of the round (2026-12-06): the round-13 helper's report (for docs/change-points.md);
run time is about 10-25 s per method on the tune half, quality control,
synthetic and two-season suites. The O(n^2) cost matrix is fine for the tune half (n <= 816);
a port would need DeCAFS' functional pruning or the default's candidate grid.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import changepoints_model as cm  # noqa: E402
import changepoints_tcpd as tcpd  # noqa: E402

LN2PI = np.log(2 * np.pi)
KAPPA = 1e7  # diffuse prior variance, in the prepared (robust noise) units
GUARD = 100.0  # a model that misses the lag-1 variance by this factor does not describe the series


# ------------------------------------------------------------------------------ parameters
def mad_var(v):
    v = np.asarray(v, float)
    return float((1.4826 * np.median(np.abs(v - np.median(v)))) ** 2)


def estimate(z, K=15, phis=np.linspace(0.0, 0.99, 100), order=1, no_eta=False):
    """(s_eta^2, s_nu^2, phi) from the robust variances of the lag-k differences, k = 1 .. K.
    `order=2`: of the lag-k second differences z[t+2k] - 2 z[t+k] + z[t] instead, whose
    variance is 2 k s_eta^2 + s_e^2 (6 - 8 phi^k + 2 phi^2k): a drift (slope) that is constant
    over 2k samples cancels, so slopes inside segments do not pass for local fluctuations."""
    n = len(z)
    K = max(2, min(K, n // (4 * order)))
    ks = np.arange(1, K + 1)
    if order == 1:
        v = np.array([mad_var(z[k:] - z[:-k]) for k in ks])
    else:
        v = np.array([mad_var(z[2 * k:] - 2 * z[k:-k] + z[:-2 * k]) for k in ks])
    best = (np.inf, 0.0, 0.0, 0.0)
    for phi in phis:
        a = ks.astype(float) * order
        b = 2 * (1 - phi ** ks) if order == 1 else 6 - 8 * phi ** ks + 2 * phi ** (2 * ks)
        X = np.c_[a, b]
        coef, *_ = np.linalg.lstsq(X, v, rcond=None)
        if no_eta:
            coef = np.array([0.0, max((b @ v) / (b @ b), 0.0)])
        elif coef[0] < 0 or coef[1] < 0:  # non-negative: the best single-column fits
            cands = [(max((a @ v) / (a @ a), 0.0), 0.0), (0.0, max((b @ v) / (b @ b), 0.0))]
            coef = min(cands, key=lambda c: float(((X @ np.array(c)) - v) @ ((X @ np.array(c)) - v)))
            coef = np.array(coef)
        r = X @ coef - v
        sse = float(r @ r)
        if sse < best[0] - 1e-12:
            best = (sse, float(coef[0]), float(coef[1]), float(phi))
    _, eta2, e2, phi = best
    return eta2, e2 * (1 - phi * phi), phi


# ------------------------------------------------------------------------------ segment costs
def gains(n, eta2, nu2, phi, drift=False, floor=1e-6):
    """Innovation variances S[a] and gains K[a] by segment age a = 0 .. n-1 (age 0: the first
    sample, an update without prediction). State (mu, e) or (mu, b, e)."""
    e2 = nu2 / (1 - phi * phi) if phi < 1 else nu2
    if drift:
        F = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, phi]])
        Q = np.diag([eta2, 0.0, nu2])
        H = np.array([1.0, 0.0, 1.0])
        P = np.diag([KAPPA, KAPPA, e2])
    else:
        F = np.array([[1.0, 0.0], [0.0, phi]])
        Q = np.diag([eta2, nu2])
        H = np.array([1.0, 1.0])
        P = np.diag([KAPPA, e2])
    d = len(H)
    S = np.empty(n)
    G = np.empty((n, d))
    for a in range(n):
        if a > 0:
            P = F @ P @ F.T + Q
        s = max(float(H @ P @ H), floor)
        k = P @ H / s
        P = P - np.outer(k, k) * s
        P = (P + P.T) / 2
        S[a], G[a] = s, k
    return F, H, S, G


def cost_matrix(z, eta2, nu2, phi, drift=False, floor=1e-6, parts=False):
    """C[s, t]: -log-likelihood of z[s:t] as one segment (diffuse start), all s < t <= n.
    With `parts`, the pieces (L, Q, M) instead: the log-determinant part sum 0.5 ln(2 pi S),
    the quadratic part sum v^2 / S and the number of samples with a density, so that a
    segment's own variance scale can be profiled (`C = L + Q / 2` at scale 1)."""
    n = len(z)
    F, H, S, G = gains(n, eta2, nu2, phi, drift, floor)
    nd = 2 if drift else 1  # diffuse states: their samples carry no density
    dens = 0.5 * (LN2PI + np.log(S))
    dens[:nd] = 0.0
    inv = 1.0 / S
    inv[:nd] = 0.0
    d = len(H)
    M = np.zeros((n, d))  # filter mean for each start s (row s), valid for s <= t
    Lm = np.full((n, n + 1), np.inf)
    Qm = np.full((n, n + 1), np.inf)
    accL = np.zeros(n)
    accQ = np.zeros(n)
    for t in range(n):
        # new filter at start t: age 0, prior mean 0
        M[t] = G[0] * z[t]
        Lm[t, t + 1] = Qm[t, t + 1] = 0.0
        if t == 0:
            continue
        s = np.arange(t)
        age = t - s
        m = M[:t] @ F.T
        v = z[t] - m @ H
        M[:t] = m + G[age] * v[:, None]
        accL[:t] += dens[age]
        accQ[:t] += v * v * inv[age]
        Lm[:t, t + 1] = accL[:t]
        Qm[:t, t + 1] = accQ[:t]
    # profile normalisation: each segment is charged the density its diffuse samples dropped
    Lm += nd * 0.5 * (LN2PI + np.log(S[-1]))
    if parts:
        idx = np.arange(n + 1)
        cnt = np.maximum(idx[None, :] - np.arange(n)[:, None] - nd, 0).astype(float)
        return Lm, Qm, cnt, S[-1]
    return Lm + 0.5 * Qm


def scaled_cost(z, eta2, nu2, phi, drift, floor):
    """A segment's own variance scale lam (both variances times lam), profiled:
    L + 0.5 M ln lam_hat + 0.5 M with lam_hat = Q / M (floored at the rounding noise)."""
    L, Q, M, s_inf = cost_matrix(z, eta2, nu2, phi, drift, floor, parts=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.maximum(np.where(M > 0, Q / np.maximum(M, 1), 1.0), floor / s_inf)
        C = L + 0.5 * M * np.log(lam) + 0.5 * M
    C[~np.isfinite(Q)] = np.inf
    return C


def partition(C, beta, min_size, with_cost=False):
    n = C.shape[0]
    f = np.full(n + 1, np.inf)
    prev = np.zeros(n + 1, int)
    f[0] = -beta
    for t in range(min_size, n + 1):
        s = np.arange(0, t - min_size + 1)
        v = f[s] + C[s, t] + beta
        i = int(np.argmin(v))
        f[t], prev[t] = v[i], s[i]
    cps, t = [], n
    while t > 0:
        t = prev[t]
        if t > 0:
            cps.append(int(t))
    return (sorted(cps), float(f[n])) if with_cost else sorted(cps)


def misfit(z, params):
    """How badly the fitted model misses the lag-1 variance: fitted / observed (>= 1)."""
    eta2, nu2, phi = params
    e2 = nu2 / (1 - phi * phi)
    fit = eta2 + 2 * e2 * (1 - phi)
    obs = mad_var(np.diff(z))
    if not obs > 0:
        return np.inf
    return max(fit / obs, obs / fit) if fit > 0 else np.inf


def decafs(x, c=2.0, drift=False, min_size=5, params=None, scale=False, guard=None, order=1, select=False):
    """Changes under the random walk + AR(1) noise model (`drift`: and an optional drift;
    `decafs_scale_c1` (and `decafs_scale`, c = 2; `decafs_scale_c1_guard`): with drift and
        each segment its own variance scale, one more parameter per change). `guard`: a
    bound on `misfit`; a series the model misses by more is left to the default."""
    x = np.asarray(x, float)
    n = len(x)
    if n < 2 * min_size or np.all(x == x[0]):
        return []
    z, floor = cm.prepare(x)
    eta2, nu2, phi = params or estimate(z, order=order)
    if eta2 + nu2 <= floor:
        nu2 = floor
    if guard is not None and misfit(z, (eta2, nu2, phi)) > guard:
        return cm.detect(x)
    per_param = c * 0.5 * np.log(n)
    if select and eta2 > 0:
        # the same without local fluctuations (s_eta = 0: AR(1) noise around piecewise
        # constant or linear levels), parameters fitted with s_eta fixed at 0; the model with
        # the lower penalised cost wins, s_eta costing one parameter
        cands = []
        for p, extra in [((eta2, nu2, phi), per_param), (estimate(z, order=order, no_eta=True), 0.0)]:
            C = cost_matrix(z, *p, False, floor)
            if drift:
                C = np.minimum(C, cost_matrix(z, *p, True, floor) + per_param)
            cps, f = partition(C, 2 * per_param, min_size, with_cost=True)
            cands.append((f + extra, cps))
        return min(cands, key=lambda r: r[0])[1]
    if scale:
        C = scaled_cost(z, eta2, nu2, phi, False, floor)
        if drift:
            C = np.minimum(C, scaled_cost(z, eta2, nu2, phi, True, floor) + per_param)
        return partition(C, 3 * per_param, min_size)
    C = cost_matrix(z, eta2, nu2, phi, False, floor)
    if drift:
        C = np.minimum(C, cost_matrix(z, eta2, nu2, phi, True, floor) + per_param)
    return partition(C, 2 * per_param, min_size)


def decafs_drift(x, **kw):
    return decafs(x, drift=True, **kw)


def decafs_c1(x, **kw):
    return decafs(x, c=1.0, **kw)


# ------------------------------------------------------------------------------ slope heuristic
def default_cost(x):
    """The default's cost object on the prepared series, and its per-parameter penalty."""
    x = np.asarray(x, float)
    n = len(x)
    z, floor = cm.prepare(x)
    rho = cm.lag1(z)
    rho = min(max(rho, 0.0), 0.8) if np.isfinite(rho) else 0.8
    vif = cm.second_order((1 + rho) / (1 - rho), n, z)
    pp = 2.0 * np.log(max(n / vif, 2.0)) * vif
    return cm.Cost(z, 2 * pp, floor), pp


def segment_neighbourhood(cost, kmax, min_size):
    """best[k] = the lowest total cost with k changes, and the change lists."""
    n = cost.n
    C = np.full((n + 1, n + 1), np.inf)
    for t in range(min_size, n + 1):
        s = np.arange(0, t - min_size + 1)
        C[s, t] = cost.cost_vec(s, t)
    f = C[0].copy()  # one segment [0, t)
    back = []
    best = [f[n]]
    for k in range(1, kmax + 1):
        g = np.full(n + 1, np.inf)
        arg = np.zeros(n + 1, int)
        for t in range((k + 1) * min_size, n + 1):
            s = np.arange(k * min_size, t - min_size + 1)
            v = f[s] + C[s, t]
            i = int(np.argmin(v))
            g[t], arg[t] = v[i], s[i]
        back.append(arg)
        f = g
        best.append(f[n])
    sols = []
    for k in range(kmax + 1):
        cps, t = [], n
        for j in range(k, 0, -1):
            t = back[j - 1][t]
            cps.append(int(t))
        sols.append(sorted(cps))
    return np.array(best), sols


def slope_heuristic(x, a=2.0, min_size=5, kmax=None):
    x = np.asarray(x, float)
    n = len(x)
    if n < 2 * min_size or np.all(x == x[0]):
        return []
    cost, _ = default_cost(x)
    kmax = kmax or max(1, min(n // 10, 40, n // min_size - 1))
    best, sols = segment_neighbourhood(cost, kmax, min_size)
    ks = np.arange(kmax + 1)
    shape = np.where(ks > 0, ks * (a + np.log(n / np.maximum(ks, 1))), 0.0)
    ok = np.isfinite(best)
    kappas = np.geomspace(1e-3, 1e4, 2000)
    sel = np.array([int(ks[ok][np.argmin(best[ok] + kp * shape[ok])]) for kp in kappas])
    jumps = sel[:-1] - sel[1:]
    j = int(np.argmax(jumps))
    if jumps[j] <= 0:
        return sols[int(sel[0])]
    kappa_min = kappas[j + 1]
    k = int(ks[ok][np.argmin(best[ok] + 2 * kappa_min * shape[ok])])
    return sols[k]


# ------------------------------------------------------------------------------ combinations
def default_or_decafs(x, gap=5, **kw):
    out = list(cm.detect(x))
    for c in decafs(x, **kw):  # (with a guard, a guarded series returns the default's own)
        if all(abs(c - o) >= gap for o in out):
            out.append(c)
    return sorted(out)


def default_and_decafs(x, half=5, **kw):
    other = decafs(x, drift=True, **kw)
    return [c for c in cm.detect(x) if any(abs(c - o) <= half for o in other)]


# ------------------------------------------------------------------------------ driver
def params_table(series):
    """The estimated (s_eta^2, s_nu^2, phi) of the tune-half and quality-control series."""
    for name, _, s in cm.tune_and_qc(series):
        raw = s["values"]
        z, _ = cm.prepare(raw[np.isfinite(raw)])
        eta2, nu2, phi = estimate(z)
        print(f"  {name:22s} n {len(z):4d}  s_eta^2 {eta2:7.3f}  s_nu^2 {nu2:7.3f}  phi {phi:.2f}")


METHODS = {
    "default": cm.detect,
    "decafs": decafs,
    "decafs_drift": decafs_drift,
    "decafs_c1": decafs_c1,
    "decafs_drift_c1": lambda x: decafs(x, c=1.0, drift=True),
    "decafs_scale_c1": lambda x: decafs(x, c=1.0, drift=True, scale=True),
    "decafs_scale": lambda x: decafs(x, c=2.0, drift=True, scale=True),
    "decafs_drift_c1_guard": lambda x: decafs(x, c=1.0, drift=True, guard=GUARD),
    "decafs_scale_c1_guard": lambda x: decafs(x, c=1.0, drift=True, scale=True, guard=GUARD),
    "default_or_decafs_c1_guard": lambda x: default_or_decafs(x, c=1.0, drift=True, guard=GUARD),
    "decafs_drift_c1_d2_guard": lambda x: decafs(x, c=1.0, drift=True, guard=GUARD, order=2),
    "decafs_drift_d2_guard": lambda x: decafs(x, c=2.0, drift=True, guard=GUARD, order=2),
    "decafs_drift_c1_select_guard": lambda x: decafs(x, c=1.0, drift=True, guard=GUARD, select=True),
    "decafs_drift_select_guard": lambda x: decafs(x, c=2.0, drift=True, guard=GUARD, select=True),
    "decafs_drift_c1_select": lambda x: decafs(x, c=1.0, drift=True, select=True),
    # sensitivity of decafs_drift_c1_guard to its constants (not for choosing them)
    "decafs_drift_c0.75_guard": lambda x: decafs(x, c=0.75, drift=True, guard=GUARD),
    "decafs_drift_c1.25_guard": lambda x: decafs(x, c=1.25, drift=True, guard=GUARD),
    "decafs_drift_c1.5_guard": lambda x: decafs(x, c=1.5, drift=True, guard=GUARD),
    "decafs_drift_c1_guard10": lambda x: decafs(x, c=1.0, drift=True, guard=10.0),
    "slope_heuristic": slope_heuristic,
    "default_or_decafs": default_or_decafs,
    "default_and_decafs": default_and_decafs,
}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    series, _ = tcpd.load(sys.argv[1])
    names = sys.argv[2:] or list(METHODS)
    if "params" in names:
        params_table(series)
        names = [m for m in names if m != "params"]
    cm.run_methods(series, METHODS, names)


if __name__ == "__main__":
    main()
