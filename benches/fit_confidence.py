#!/usr/bin/env python3
"""Fits the confidence mapping of query/src/diagnose/verdict/calibration.rs from evaluation runs.

Usage: benches/fit_confidence.py RUNS.csv [RUNS.csv ...]   (target/diagnose_independent_runs*.csv
of the TUNING seeds). Episode verdicts: isotonic regression (pool adjacent violators) of the AC@1
outcome on `rule_confidence`, each block's accuracy smoothed as (right + 0.5) / (runs + 1) (half a
right and half a wrong verdict added), pooled again where smoothing breaks the order; each block
is flat from its lowest to its highest rule score (two knots), linear between blocks. Contested
episode verdicts (the runs' `contested` column: a suspect of another domain close in time and
score, `RIVAL_SHARE` / `RIVAL_NS` in verdict.rs): capped at their smoothed accuracy. Healthy
verdicts: isotonic regression (non-increasing) of the outcome on the near miss's rise
(`near_miss_rise`), smoothed and flat per block the same way. Prints the Rust constants.
"""
import csv
import sys


def kind(r):
    if r["status"] == "healthy":
        return "healthy"
    if r["status"] == "insufficient_data" or int(r["episodes"]) == 0:
        return "other"
    return "episode"


def isotonic(points, prior, weight=1.0):
    """points [(x, y)]; non-decreasing fit, equal x in one block, each block smoothed as
    (right + weight * prior) / (runs + weight) and pooled again where smoothing breaks the order;
    returns [(lowest x, highest x, p, runs, right, mean x)] per block."""
    groups = {}
    for x, y in points:
        g = groups.setdefault(x, [x, x, 0.0, 0, 0.0])
        g[2] += y
        g[3] += 1
        g[4] += x
    blocks = []
    rate = lambda b: b[2] / b[3]
    for x in sorted(groups):
        blocks.append(list(groups[x]))
        while len(blocks) > 1 and rate(blocks[-2]) >= rate(blocks[-1]):
            b = blocks.pop()
            blocks[-1][1] = b[1]
            for i in (2, 3, 4):
                blocks[-1][i] += b[i]
    smoothed = []
    p = lambda b: (b[2] + weight * prior) / (b[3] + weight)
    for b in blocks:
        smoothed.append(list(b))
        while len(smoothed) > 1 and p(smoothed[-2]) > p(smoothed[-1]):
            b = smoothed.pop()
            smoothed[-1][1] = b[1]
            for i in (2, 3, 4):
                smoothed[-1][i] += b[i]
    return [(b[0], b[1], p(b), b[3], int(b[2]), b[4] / b[3]) for b in smoothed]


def knots_of(blocks):
    """Knots (x, p): each block flat from its lowest to its highest x, linear between blocks."""
    out = []
    for lo, hi, p, _, _, _ in blocks:
        out.append((round(lo, 3), round(p, 3)))
        if hi > lo:
            out.append((round(hi, 3), round(p, 3)))
    return out


rows = [r for f in sys.argv[1:] for r in csv.DictReader(open(f))]
ok = lambda r: r["ok1"] == "true"
eps = [r for r in rows if kind(r) == "episode"]
ep = sorted((float(r["rule_confidence"]), 1.0 if ok(r) else 0.0) for r in eps)
# Smoothing: half a right and half a wrong verdict added to each block (weight 1 towards 0.5), so
# that a small block of all-wrong or all-right verdicts is not mapped to 0 or 1.
PRIOR, WEIGHT = 0.5, 1.0
blocks = isotonic(ep, PRIOR, WEIGHT)
knots = knots_of(blocks)
print("episode verdicts:", len(ep), "right:", int(sum(y for _, y in ep)))
for b in blocks:
    print("  rule %.3f-%.3f -> %.3f  (%d runs, %d right)" % b[:5])
print("const EPISODE_KNOTS: [(f64, f64); %d] = [%s];" % (len(knots), ", ".join("(%.3f, %.3f)" % k for k in knots)))


def interpolate(knots, x):
    if x <= knots[0][0]:
        return knots[0][1]
    if x >= knots[-1][0]:
        return knots[-1][1]
    for (x0, y0), (x1, y1) in zip(knots, knots[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1
    return knots[-1][1]


# Contested verdicts (the `contested` column: what the code flagged with `RIVAL_SHARE` / `RIVAL_NS`,
# which also decide when the fault that changed first leads): capped at their smoothed accuracy.
contested = lambda r: r.get("contested") == "true"
flagged = [r for r in eps if contested(r)]
right = sum(ok(r) for r in flagged)
cap = (right + WEIGHT * PRIOR) / (len(flagged) + WEIGHT)
brier = lambda capped: sum(
    ((min(p, cap) if capped and contested(r) else p) - (1.0 if ok(r) else 0.0)) ** 2
    for r in eps
    for p in [interpolate(knots, float(r["rule_confidence"]))]
) / max(len(eps), 1)
print("contested: %d verdicts, %d right, cap %.3f; episode Brier %.4f without the cap, %.4f with it"
      % (len(flagged), right, cap, brier(False), brier(True)))
print("const CONTESTED: f64 = %.3f;" % cap)
healthy = [r for r in rows if kind(r) == "healthy"]
# Non-increasing in the rise: fit the outcome on the negated rise.
hb = isotonic([(-float(r.get("near_miss_rise") or 0.0), 1.0 if ok(r) else 0.0) for r in healthy], PRIOR, WEIGHT)
hb = [(-hi, -lo, p, n, k, -m) for lo, hi, p, n, k, m in reversed(hb)]
# Each block flat over its rises, linear between blocks (as the episode map). The generator's
# benign pace drift (`Wobble` in sim/src/independent/dynamics.rs) gives right healthy verdicts
# with small near misses, so the fall between "no rise" and the missed faults is measured.
hk = [(round(x, 4), round(p, 3)) for lo, hi, p, _, _, _ in hb for x in ((lo, hi) if hi > lo else (lo,))]
print("healthy verdicts:", len(healthy), "right:", sum(ok(r) for r in healthy))
for b in hb:
    print("  rise %.4f-%.4f -> %.3f  (%d runs, %d right, mean rise %.4f)" % b)
print("const HEALTHY_KNOTS: [(f64, f64); %d] = [%s];" % (len(hk), ", ".join("(%.4f, %.3f)" % k for k in hk)))
o = [r for r in rows if kind(r) == "other"]
print("other (slow_from_start without episode, insufficient_data):", len(o), "runs,", sum(ok(r) for r in o), "right",
      sorted(set(r["rule_confidence"] for r in o)))
