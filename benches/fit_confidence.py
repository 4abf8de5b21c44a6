#!/usr/bin/env python3
"""Fits the confidence mapping of query/src/diagnose/verdict/calibration.rs from evaluation runs.

Usage: benches/fit_confidence.py RUNS.csv [RUNS.csv ...]   (target/diagnose_independent_runs*.csv
of the TUNING seeds). Episode verdicts: isotonic regression (pool adjacent violators) of the AC@1
outcome on `rule_confidence`, each block's accuracy smoothed as (right + 1) / (runs + 2), then
smoothed as (right + p) / (runs + 1) towards the accuracy p of all episode verdicts, pooled again where smoothing breaks the
order; the knots are the blocks' mean rule scores. Healthy verdicts: the smoothed
accuracy without and with gaps (`missing` > 0). Prints the Rust constants.
"""
import csv
import sys


def kind(r):
    if r["status"] == "healthy":
        return "healthy"
    if r["status"] == "insufficient_data" or int(r["episodes"]) == 0:
        return "other"
    return "episode"


def pav(points):
    """points: sorted [(x, y)]; returns blocks [(sum_x, sum_y, n)] with non-decreasing means."""
    blocks = []
    for x, y in points:
        blocks.append([x, y, 1])
        while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] > blocks[-1][1] / blocks[-1][2]:
            b = blocks.pop()
            for i in range(3):
                blocks[-1][i] += b[i]
    return blocks


rows = [r for f in sys.argv[1:] for r in csv.DictReader(open(f))]
ok = lambda r: r["ok1"] == "true"
ep = sorted((float(r["rule_confidence"]), 1.0 if ok(r) else 0.0) for r in rows if kind(r) == "episode")
# Ties at the same score go in one block: group equal x first.
groups = {}
for x, y in ep:
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
# Smooth each block towards the episode verdicts' accuracy p as (right + p) / (runs + 1), then pool adjacent violators again (weighted by
# runs) so that the smoothed probabilities stay non-decreasing; equal neighbours are one knot.
prior = sum(y for _, y in ep) / max(len(ep), 1)
smoothed = []
for sx, sy, n in blocks:
    smoothed.append([sx, (sy + prior) / (n + 1) * n, n, sy])
    while len(smoothed) > 1 and smoothed[-2][1] / smoothed[-2][2] > smoothed[-1][1] / smoothed[-1][2]:
        b = smoothed.pop()
        for i in range(4):
            smoothed[-1][i] += b[i]
knots = [(round(sx / n, 3), round(sy / n, 3), n, int(k)) for sx, sy, n, k in smoothed]
print("episode verdicts:", len(ep), "right:", int(sum(y for _, y in ep)))
for k in knots:
    print("  block mean rule %.3f -> %.3f  (%d runs, %d right)" % k)
print("const EPISODE_KNOTS: [(f64, f64); %d] = [%s];" % (len(knots), ", ".join("(%.3f, %.3f)" % (k[0], k[1]) for k in knots)))
healthy = {}
for gaps in (False, True):
    h = [r for r in rows if kind(r) == "healthy" and (int(r["missing"]) > 0) == gaps]
    healthy[gaps] = (len(h), sum(ok(r) for r in h))
    print("healthy, gaps=%s: %d runs, %d right -> %.3f" % (gaps, len(h), healthy[gaps][1], (healthy[gaps][1] + 1) / (len(h) + 2)))
p = {g: (k + 1) / (n + 2) for g, (n, k) in healthy.items()}
if p[True] > p[False]:
    n = healthy[True][0] + healthy[False][0]
    k = healthy[True][1] + healthy[False][1]
    p = {False: (k + 1) / (n + 2), True: (k + 1) / (n + 2)}
    print("gaps no worse than without: pooled")
print("const HEALTHY: (f64, f64) = (%.3f, %.3f);" % (p[False], p[True]))
o = [r for r in rows if kind(r) == "other"]
print("other (slow_from_start without episode, insufficient_data):", len(o), "runs,", sum(ok(r) for r in o), "right",
      sorted(set(r["rule_confidence"] for r in o)))
