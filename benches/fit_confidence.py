#!/usr/bin/env python3
"""Fits the confidence mapping of query/src/diagnose/verdict/calibration.rs from evaluation runs.

Usage: benches/fit_confidence.py RUNS.csv [RUNS.csv ...]   (target/diagnose_independent_runs*.csv
of the TUNING seeds). Episode verdicts: isotonic regression (pool adjacent violators) of the AC@1
outcome on `rule_confidence`, each block's accuracy smoothed as (right + p) / (runs + 1) towards
the accuracy p of all episode verdicts, pooled again where smoothing breaks the order; the knots
are the blocks' mean rule scores. Contested episode verdicts (a suspect of another
domain close in time and score, `RIVAL_SHARE` / `RIVAL_NS` in verdict.rs): each candidate pair of
thresholds is scored by the tuning Brier score of the mapping capped at the contested verdicts'
smoothed accuracy; the best pair and its cap are printed. Healthy verdicts: isotonic regression
(non-increasing) of the outcome on the near miss's rise (`near_miss_rise`), smoothed the same
way towards the accuracy of all healthy verdicts. Prints the Rust constants.
"""
import csv
import sys


def kind(r):
    if r["status"] == "healthy":
        return "healthy"
    if r["status"] == "insufficient_data" or int(r["episodes"]) == 0:
        return "other"
    return "episode"


def isotonic(points, prior):
    """points [(x, y)]; non-decreasing fit, equal x in one block, each block smoothed towards
    prior as (right + prior) / (runs + 1) and pooled again; returns [(mean x, p, runs, right)]."""
    groups = {}
    for x, y in points:
        g = groups.setdefault(x, [0.0, 0.0, 0])
        g[0] += x
        g[1] += y
        g[2] += 1
    blocks = []
    for x in sorted(groups):
        blocks.append(list(groups[x]))
        while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] >= blocks[-1][1] / blocks[-1][2]:
            b = blocks.pop()
            for i in range(3):
                blocks[-1][i] += b[i]
    smoothed = []
    for sx, sy, n in blocks:
        smoothed.append([sx, (sy + prior) / (n + 1) * n, n, sy])
        while len(smoothed) > 1 and smoothed[-2][1] / smoothed[-2][2] > smoothed[-1][1] / smoothed[-1][2]:
            b = smoothed.pop()
            for i in range(4):
                smoothed[-1][i] += b[i]
    return [(sx / n, sy / n, n, int(k)) for sx, sy, n, k in smoothed]


rows = [r for f in sys.argv[1:] for r in csv.DictReader(open(f))]
ok = lambda r: r["ok1"] == "true"
ep = sorted((float(r["rule_confidence"]), 1.0 if ok(r) else 0.0) for r in rows if kind(r) == "episode")
prior = sum(y for _, y in ep) / max(len(ep), 1)
knots = [(round(x, 3), round(p, 3), n, k) for x, p, n, k in isotonic(ep, prior)]
print("episode verdicts:", len(ep), "right:", int(sum(y for _, y in ep)))
for k in knots:
    print("  block mean rule %.3f -> %.3f  (%d runs, %d right)" % k)
print("const EPISODE_KNOTS: [(f64, f64); %d] = [%s];" % (len(knots), ", ".join("(%.3f, %.3f)" % (k[0], k[1]) for k in knots)))


def interpolate(knots, x):
    if x <= knots[0][0]:
        return knots[0][1]
    if x >= knots[-1][0]:
        return knots[-1][1]
    for (x0, y0), (x1, y1) in zip(knots, knots[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1
    return knots[-1][1]


episode_knots = [(k[0], k[1]) for k in knots]
eps = [r for r in rows if kind(r) == "episode"]
best = None
for share in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
    for gap in (15, 30, 45, 60, 90, 120, 180):
        flagged = [r for r in eps if float(r["rival_share"]) >= share and r["rival_gap_s"] != "NaN" and abs(float(r["rival_gap_s"])) <= gap]
        if not flagged:
            continue
        right = sum(ok(r) for r in flagged)
        cap = (right + prior) / (len(flagged) + 1)
        brier = 0.0
        for r in eps:
            p = interpolate(episode_knots, float(r["rule_confidence"]))
            if r in flagged:
                p = min(p, cap)
            brier += (p - (1.0 if ok(r) else 0.0)) ** 2
        brier /= len(eps)
        if best is None or brier < best[0] - 1e-12:
            best = (brier, share, gap, len(flagged), right, cap)
base = sum((interpolate(episode_knots, float(r["rule_confidence"])) - (1.0 if ok(r) else 0.0)) ** 2 for r in eps) / max(len(eps), 1)
print("episode Brier without a contested cap: %.4f" % base)
if best:
    print("contested: share >= %.1f, |gap| <= %d s: %d verdicts, %d right, cap %.3f (Brier %.4f)"
          % (best[1], best[2], best[3], best[4], best[5], best[0]))
    print("const RIVAL_SHARE: f64 = %.1f; const RIVAL_NS = %d s; const CONTESTED: f64 = %.3f;" % (best[1], best[2], best[5]))
healthy = [r for r in rows if kind(r) == "healthy"]
hp = sum(ok(r) for r in healthy) / max(len(healthy), 1)
# Non-increasing in the rise: fit the outcome on the negated rise.
hk = isotonic([(-float(r.get("near_miss_rise") or 0.0), 1.0 if ok(r) else 0.0) for r in healthy], hp)
hk = [(0.0 - x + 0.0, p, n, k) for x, p, n, k in reversed(hk)]
print("healthy verdicts:", len(healthy), "right:", sum(ok(r) for r in healthy))
for k in hk:
    print("  block mean rise %.4f -> %.3f  (%d runs, %d right)" % k)
print("const HEALTHY_KNOTS: [(f64, f64); %d] = [%s];" % (len(hk), ", ".join("(%.4f, %.3f)" % (k[0], k[1]) for k in hk)))
o = [r for r in rows if kind(r) == "other"]
print("other (slow_from_start without episode, insufficient_data):", len(o), "runs,", sum(ok(r) for r in o), "right",
      sorted(set(r["rule_confidence"] for r in o)))
