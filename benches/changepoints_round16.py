#!/usr/bin/env python3
"""Round 16: one DeCAFS search, its parameter estimate chosen before it; spread changes inside
the state-space segmentation; kinks.

  benches/changepoints_round16.py TCPD_DIR [METHOD ...]
  benches/changepoints_round16.py TCPD_DIR big METHOD ...   (synthetic suite, 60 repetitions, seed 2)

Same protocol as rounds 13-15 (tune half, quality control, synthetic and two-season suites
only, through `changepoints_model.score`; the eval half is never scored).

(1) One search (`choose`): round 14 segments the series twice, under the parameter estimate
    from the series (round 13's) and the one from the default's residuals, and keeps the lower
    penalised cost (nll + Bonferroni penalty per change): the profile likelihood over
    {estimate} x {segmentation}. Here the two estimates compete on segmentations known
    before any DeCAFS search, and one search runs under the winner:
      `pilot`: nll at the default's changes (the segmentation the residual estimate comes from);
      `null`:  nll with no change (the brief's "likelihood under no change");
      `both`:  round 14's own criterion, nll + the Bonferroni penalty per change, minimised
               over those two segmentations (the default's and none): the two-search rule
               with the search replaced by a choice between two segmentations.
(2) Spread (`spread`): round 15's test (kurtosis-corrected Inclan-Tiao on the no-change
    innovations at ADEQUACY_LEVEL) decides as before; when it rejects, `"default"` (round 15:
    the default's answer) or `"regimes"` (ICSS-style binary segmentation of the innovations by
    the same statistic and critical value; each regime its own variance scale, the mean
    squared innovation, and its own search; the cuts are changes), or `"regimes_snap"` (a cut
    is reported only where the default, whose segments have their own variance, has a change
    within a minimum segment).
(3) Kinks: round 15's snap to the default's changes (all candidates). No edge rule was added:
    the estimate choice alone brought kinks to 0.97 on the 60-repetition check.

RESULTS (2026-12-06; one process at a time on the shared 2-core machine)

Table: tune F1 / cover; QC F1; null changes walk 600 / walk 40 / AR(0.7) 40; found alone
step / kink / AR + step; two-season null changes (3 reps) | 60 repetitions, seed 2: null
walk 600 / walk 40 / AR(0.7) 40; found alone step / kink / AR + step.
  default              0.749/0.735; 0.865; 1.55/0.15/0.10; 0.75/1.00/1.00; 0.87
                       | 1.78/0.08/0.05; 0.72/0.97/0.92                  (earlier rounds' runs)
  r15_vtest_snap       0.798/0.743; 0.937; 0.15/0.10/0.05; 0.75/0.95/1.00; 0.37
                       | 0.22/0.20/0.05; 0.77/0.93/0.90                  (round 15's run; tune and
                                                                          QC F1 reproduced here)
  r16_both_vtest       0.803/0.752; 0.937; 0.15/0.10/0.05; 0.75/1.00/1.00; 0.37
    (the candidate)    | 0.22/0.20/0.05; 0.77/0.97/0.90
  r16_pilot_vtest      0.828/0.776; 0.902; 0.20/0.15/0.05; 0.85/1.00/1.00; 0.37
                       | 0.23/0.23/0.05; 0.82/0.97/0.90
  r16_null_vtest       0.803; 0.937 (tune/QC F1 only, `/tmp` per-series run)
                       | 0.22/0.18/0.05; 0.53/0.00/0.88   (kinks 0: the walk estimate always
                                                            wins under no change; dropped)
  r16_both_regimes_snap 0.808/0.739; 0.937; 0.10/0.10/0.05; 0.75/0.95/1.00; 0.28
                       (trend 200 null: 0.10, all others 0)
                       | 0.20/0.22/0.05; 0.77/0.87/0.88   (trend 200: 0.10)
  r16_both_regimes     0.803; 0.897 (tune/QC F1 only)
  r16_pilot_regimes    0.829; 0.862 (tune/QC F1 only)
  (white 1000, AR(0.7) 500 and trend 200 nulls: 0 for every candidate except where noted;
  the 60/2 AR(0.7) 500: 0.03 for all r16 runs, as r15. Two seasons, shift found alone: 0.796
  for both_vtest and pilot_vtest, 0.815 for both_regimes_snap.)

Series that moved (tune half and QC only; F1 [changes]), r15_vtest_snap -> r16_both_vtest
(both times the series estimate wins the pre-search choice where round 15's two searches
picked the residual estimate):
  children_per_woman 0.69 [98, 133, 166, 171, 177, 200] -> 0.72 [133, 167, 177, 199]
  well_log           0.92 [..., 657, 667] -> 0.96 [..., 657]
  every other tune/QC series unchanged.
r16_pilot_vtest further: seatbelts 0.62 [] -> 0.97 [58, 168] (tune +0.025) but
  quality_control_4 0.94 [342] -> 0.76 [342, 443], and more null changes (walk 600 0.20, walk 40
  0.15 / 0.23 on the 60/2 check, against r15's 0.15 / 0.10 / 0.20): the default's false
  changes on a walk make its residual estimate win at its own segmentation; `both` charges
  them the penalty, so the walk estimate wins there again.
Spread regimes (`r16_both_regimes_snap` against `r16_both_vtest`): shanghai_license 0.97 ->
  1.00 [108, 142], co2_canada 0.31 -> 0.53 [80, 88], but brent_spot 0.48 -> 0.35 [117, 375]
  (its annotated jumps 219-230 sit in a variance burst; a regime with its own scale absorbs
  them), jfk_passengers 0.78 -> 0.72 []; and on synthetic series the spread test's few
  rejections now matter: kinks 0.97 -> 0.87 on the 60/2 check, trend-200 nulls 0 -> 0.10
  (with `"default"` those series fall back to the default, which handles a kink). Left out.
  Reporting every cut (`regimes`): QC 3 gets an extra 228, Brent 195 and 245: worse.

Open problem (1), spread, is therefore NOT solved: the constant-variance test still hands
Brent oil and CO2 Canada to the default (0.48 and 0.31, against 0.77 and 0.63 without the
test). In Brent oil the annotated changes are where the variance bursts, so a model that
explains the burst as a spread regime loses them exactly as the default does.

Constants: ALPHA = 0.05 and ADEQUACY_LEVEL = 0.001 (round 14, fixed before any run); the
regimes reuse the spread test's critical value (1.949) and the minimum segment (5, the
default's) as the shortest regime side; the snap distance is the minimum segment (round 15).
No new numerical constant. Chosen after seeing results: the pre-search criterion `both`
among three rules tried (`pilot`, `null`, `both`, all written before any was run); `pilot`
scores higher on the tune half (0.828) but adds null changes, `null` loses every kink, and
`both` is the one that keeps r15's null figures. That is a choice among three rules on
the tune half and the synthetic suites; report it as such.

Cost (Rust estimate, 1000 series x 10k points): the default (measured 12.45 s) plus ONE
DeCAFS search at round 15's measured 2.4x the default's per-pair cost: 12.45 x (1 + 2.4) =
42 s, plus set-up: one full FastCost set-up (O(1024 A) start-up and age-only tables, ~3 ms per
series in Rust), the two estimates and the adequacy test (~1 ms), the choice (two FastCost
evaluations at the default's segmentation, starts only at its changes: O(A (K + 1) + n), well
under 1 ms) and the spread test's exact no-change filter (O(n)): a few seconds in all, so
about 45-50 s single-core against the bound of about 90 s (round 15's two searches: ~80 s).
Not measured in Rust; assumes PELT prunes as well as for the default.

Meets the aim: tune F1 0.803 >= 0.80; kinks 0.97 >= 0.95 on the 60-repetition seed-2 check;
null changes equal to r15's everywhere (0.15/0.10/0.05, 60/2 0.22/0.20/0.05, two seasons
0.37); one DeCAFS search. Margins are thin: 0.803 is two tune series' worth above 0.80, and
0.97 is 58 of 60 kinks. Ready to port as far as these checks go (the port: the default, the
adequacy test, the two estimates, the choice at {default's changes, none}, the spread test
with fallback, one fast-cost search, the snap); the eval half has not been scored (still three
times).

Commands (in order; one Python process at a time):
  python3 benches/changepoints_round16.py /tmp/TCPD r16_pilot_vtest
  python3 benches/changepoints_round16.py /tmp/TCPD big r16_pilot_vtest r16_null_vtest
  python3 benches/changepoints_round16.py /tmp/TCPD r16_both_vtest
  python3 benches/changepoints_round16.py /tmp/TCPD big r16_both_vtest
  python3 benches/changepoints_round16.py /tmp/TCPD r16_both_regimes_snap
  python3 benches/changepoints_round16.py /tmp/TCPD big r16_both_regimes_snap
  (per-series tune/QC tables and the tune/QC-only F1 of r15_vtest_snap, r16_null_vtest,
  r16_*_regimes came from a `/tmp` one-off script calling `per_series` (now `changepoints_model.per_series`), not kept; the
  same per-series table is printed by the commands above.)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import changepoints_model as cm  # noqa: E402
import changepoints_round13 as r13  # noqa: E402
import changepoints_round14 as r14  # noqa: E402
import changepoints_round15 as r15  # noqa: E402
import changepoints_tcpd as tcpd  # noqa: E402

ALPHA = r14.ALPHA  # 0.05, as fixed in round 14
ADEQUACY_LEVEL = r14.ADEQUACY_LEVEL  # 0.001, as fixed in round 14


def _params(params, floor):
    eta2, nu2, phi = params
    if eta2 + nu2 <= floor:
        nu2 = floor
    return eta2, nu2, phi


# ------------------------------------------------------------------------------ choosing the estimate
def cost_at(z, floor, params, cps):
    """The model's nll of a fixed segmentation (each segment flat, or drifting at BIC's
    0.5 ln n, whichever is lower), from the fast cost with only the segments' starts."""
    eta2, nu2, phi = _params(params, floor)
    n = len(z)
    b = [0] + list(cps) + [n]
    fc = r15.FastCost(z, eta2, nu2, phi, floor, starts=np.array(b[:-1]))
    c0, c1 = fc.cost(np.arange(len(b) - 1), np.diff(b))
    return float(np.sum(np.minimum(c0, c1 + 0.5 * np.log(n))))


def choose(z, floor, cost, dcps, how="pilot"):
    """Round 14 segments under both estimates (from the series; from the default's residuals)
    and keeps the lower penalised cost: the profile likelihood over {estimate} x
    {segmentation}. Here the profile is taken at one segmentation known before the search,
    so only one search runs: `pilot`, the default's changes (the segmentation the residual
    estimate is made from); `null`, no change. Same segmentation, same penalty: the lower
    nll wins (ties: the series estimate, as in round 14)."""
    p0 = r13.estimate(z)
    p1 = r14.resid_estimate(z, cost, dcps)
    if how == "both":
        pen = r14.change_penalty(len(z), 1.0, ALPHA)
        at = [list(dcps), []] if dcps else [[]]

        def crit(p):
            return min(cost_at(z, floor, p, s) + pen * len(s) for s in at)
        return p0 if crit(p0) <= crit(p1) else p1
    at = list(dcps) if how == "pilot" else []
    return p0 if cost_at(z, floor, p0, at) <= cost_at(z, floor, p1, at) else p1


def search(z, floor, params, min_size=5, n_total=None, alpha=ALPHA):
    """Round 14's penalised search (flat or drifting segments, Bonferroni penalty per change at
    the series' length n_total) with round 15's fast cost: (changes, penalised cost)."""
    n = n_total or len(z)
    eta2, nu2, phi = _params(params, floor)
    C0, C1 = r15.FastCost(z, eta2, nu2, phi, floor).matrices()
    C = np.minimum(C0, C1 + 0.5 * np.log(n))
    if len(z) < min_size:
        return [], float(C[0, -1])
    return r13.partition(C, r14.change_penalty(n, 1.0, alpha), min_size, with_cost=True)


# ------------------------------------------------------------------------------ spread regimes
def spread_regimes(u, crit, min_size=5):
    """Binary segmentation of the standardised innovations by round 15's kurtosis-corrected
    Inclan-Tiao statistic (Inclan & Tiao's ICSS idea): a stretch whose statistic exceeds
    `crit` is cut where its centred cumulative sum of squares peaks, and both sides are
    tested again. Returns the cut positions (indices into u: the first sample of the new
    spread)."""
    cuts = []
    stack = [(0, len(u))]
    while stack:
        a, b = stack.pop()
        w = u[a:b] ** 2
        T = len(w)
        if T < 2 * min_size or r15.spread_statistic(u[a:b]) <= crit:
            continue
        C = np.cumsum(w)
        k = np.arange(1, T + 1)
        dev = np.abs(C - k * C[-1] / T)
        dev[:min_size - 1] = -1
        dev[T - min_size:] = -1  # both sides at least min_size
        j = int(np.argmax(dev)) + 1  # the first j samples before the cut
        if dev[j - 1] < 0:
            continue
        cuts.append(a + j)
        stack += [(a, a + j), (a + j, b)]
    return sorted(cuts)


# ------------------------------------------------------------------------------ the candidate
def r16(x, how="pilot", spread="regimes", snap=True, min_size=5, verbose=False):
    """The default's fit; the adequacy test (else the default's answer); the parameter
    estimate chosen at the pilot segmentation; one DeCAFS search. `spread`: when round 15's
    constant-variance test rejects on the no-change innovations, `"default"`: the default's
    answer (round 15); `"regimes"`: the innovations are cut into spread regimes
    (`spread_regimes`, same statistic and critical value as the test), each regime gets its
    own variance scale (both variances times the mean squared innovation there) and is
    searched on its own; the regime boundaries are changes; `"regimes_snap"`: the same, but a
    boundary is reported only where the default (whose segments have their own variance, so
    it prices a spread change as a change) has a change within a minimum segment (and then
    `snap` moves it there); elsewhere it only separates two variance scales. `snap`: round 15's snap to the
    default's changes."""
    x = np.asarray(x, float)
    n = len(x)
    if n < 2 * min_size or np.all(x == x[0]):
        return []
    z, floor, cost, dcps = r14.default_fit(x, min_size)
    if not r14.adequate(z):
        return dcps
    p = choose(z, floor, cost, dcps, how)
    crit = r15.kolmogorov_isf(ADEQUACY_LEVEL)
    cps = None
    if spread:
        u = r15.std_innovations(z, p, floor)
        if r15.spread_statistic(u) > crit:
            if spread == "default":
                return dcps
            cuts = [c + 1 for c in spread_regimes(u, crit, min_size)]  # u[i] is z[i + 1]'s
            b = [0] + cuts + [n]
            cps = []
            uu = np.r_[1.0, u ** 2]
            for a, e in zip(b, b[1:]):
                lam = max(float(np.mean(uu[a:e])) if e - a > 1 else 1.0, 1e-6)
                seg, _ = search(z[a:e] / np.sqrt(lam), floor / lam, p, min_size, n_total=n)
                cps += [a + c for c in seg]
            if spread == "regimes_snap":  # a cut is a change where the default's fit has one
                cuts = [c for c in cuts if any(abs(c - d) < min_size for d in dcps)]
            cps = sorted(set(cps) | set(cuts))
            if verbose:
                print(f"    regimes {cuts}", flush=True)
    if cps is None:
        cps = search(z, floor, p, min_size)[0]
    if snap:
        cps = r15.snap_to_default(z, cost, cps, dcps, min_size)
    return cps


METHODS = {
    "default": cm.detect,
    "r15_vtest_snap": lambda x: r15.decafs_two(x, vtest="default", snap="all"),
    "r16_pilot_vtest": lambda x: r16(x, "pilot", "default"),
    "r16_null_vtest": lambda x: r16(x, "null", "default"),
    "r16_both_vtest": lambda x: r16(x, "both", "default"),
    "r16_both_regimes": lambda x: r16(x, "both", "regimes"),
    "r16_both_regimes_snap": lambda x: r16(x, "both", "regimes_snap"),
    "r16_pilot_regimes_snap": lambda x: r16(x, "pilot", "regimes_snap"),
    "r16_pilot_regimes": lambda x: r16(x, "pilot", "regimes"),
    "r16_null_regimes": lambda x: r16(x, "null", "regimes"),
}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    series, _ = tcpd.load(sys.argv[1])
    names = sys.argv[2:] or list(METHODS)
    big = names[0] == "big"
    names = names[1:] if big else names
    cm.run_methods(series, METHODS, names, big=big)


if __name__ == "__main__":
    main()
