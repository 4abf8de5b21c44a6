#!/usr/bin/env python3
"""Change-point accuracy on real annotated series: the Turing Change Point Detection benchmark.

  benches/changepoints_tcpd.py TCPD_DIR [--lockstep BIN] [--variant LABEL=SQL_ARGS ...]
                               [--no-ruptures] [--boot 2000] [--json OUT]

TCPD_DIR is a checkout of https://github.com/alan-turing-institute/TCPD (van den Burg &
Williams, "An Evaluation of Change Point Detection Algorithms", 2020): `annotations.json` and
`datasets/<name>/<name>.json`. Series whose JSON is not in the repository (they are built from
external downloads: apple, bee_waggle_6, bitcoin, iceland_tourism, measles, occupancy,
ratner_stock, robocalls, scanline_*) are skipped and listed. Multivariate series (run_log) are
skipped: `change_points` is univariate. The five `quality_control_*` series are synthetic
(annotator checks) and are reported apart, never in the real-series rows.

Lockstep runs through the user path: every series is written as one metric of a bundle
(`samples.csv`, one sample per second, missing values left out), imported with
`lockstep import` into a temporary store, and detected with one query,
`SELECT metric, change_points(time, value[, SQL_ARGS]) FROM samples GROUP BY metric`, by the
`lockstep` binary given (default `target/release/lockstep`, else `target/debug/lockstep`).
Each `--variant LABEL=SQL_ARGS` adds a Lockstep row with extra arguments (e.g.
`--variant "trend='trend'"`).

ruptures (same run, each series standardised to zero mean and unit variance as in TCPD):
  Pelt(model="l2") and Binseg(model="l2") with the penalty of ruptures' documentation,
  `pen = log(n) * dim * sigma**2`, sigma estimated by the MAD of first differences / sqrt 2;
  KernelCPD(kernel="rbf") with `pen = log(n)` (the penalty the project's speed bench uses for
  it; the rbf cost is scale free); min_size=2, jump=1.
"zero" reports no change at all.

Scoring (the TCPD paper, section 4; implemented here from its definitions): every annotation
set and every prediction set also holds index 0. A prediction matches an annotation within a
margin of 5 samples, each at most once. Precision = matches of the predictions against the
union of all annotators' points / number of predictions; recall = mean over annotators of
that annotator's matched points / its points; F1 = 2PR / (P + R). Cover = mean over
annotators of the segmentation covering of the annotator's partition by the predicted one
(sum over true segments of |A| * max Jaccard(A, A'), divided by n).

Split, fixed before any result was seen: a series is in the "tune" half when
int(sha256(name), 16) is even, else in the "eval" half. Lockstep's defaults were chosen on
synthetic series, the quality-control series and the tune half only. Rows report the mean
over series with a 95 % percentile bootstrap interval over series.
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import numpy as np

MARGIN = 5
BASE_NS = 1_600_000_000_000_000_000
STEP_NS = 1_000_000_000
FAMILY = {
    "economic": ["bank", "brent_spot", "businv", "construction", "debt_ireland", "gdp_argentina",
                 "gdp_croatia", "gdp_iran", "gdp_japan", "shanghai_license", "unemployment_nl",
                 "usd_isk", "uk_coal_employ"],
    "environmental": ["co2_canada", "global_co2", "nile", "ozone", "well_log"],
    "traffic": ["jfk_passengers", "lga_passengers", "rail_lines", "seatbelts"],
    "demographic": ["centralia", "children_per_woman", "us_population"],
    "sports": ["homeruns"],
}


def half(name):
    return "tune" if int(hashlib.sha256(name.encode()).hexdigest(), 16) % 2 == 0 else "eval"


def family(name):
    if name.startswith("quality_control"):
        return "synthetic"
    for f, names in FAMILY.items():
        if name in names:
            return f
    return "other"


# ------------------------------------------------------------------------------ scoring
def matches(truth, pred, margin=MARGIN):
    """Points of `truth` matched by a distinct point of `pred` within `margin`."""
    free = set(pred)
    hit = 0
    for t in sorted(truth):
        close = sorted((abs(t - x), x) for x in free if abs(t - x) <= margin)
        if close:
            free.remove(close[0][1])
            hit += 1
    return hit


def f1(annotations, pred, margin=MARGIN):
    sets = [set(a) | {0} for a in annotations]
    x = set(pred) | {0}
    union = set().union(*sets)
    p = matches(union, x, margin) / len(x)
    r = sum(matches(s, x, margin) / len(s) for s in sets) / len(sets)
    return 0.0 if p + r == 0 else 2 * p * r / (p + r)


def partition(cps, n):
    bounds = [0] + sorted(c for c in set(cps) if 0 < c < n) + [n]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def cover(annotations, pred, n):
    guess = partition(pred, n)
    total = 0.0
    for a in annotations:
        c = 0.0
        for (s, e) in partition(a, n):
            best = 0.0
            for (s2, e2) in guess:
                inter = max(0, min(e, e2) - max(s, s2))
                if inter:
                    best = max(best, inter / (max(e, e2) - min(s, s2)))
            c += (e - s) * best
        total += c / n
    return total / len(annotations)


# ------------------------------------------------------------------------------ data
def load(tcpd):
    ann = json.load(open(os.path.join(tcpd, "annotations.json")))
    series, skipped = {}, []
    for name in sorted(ann):
        path = os.path.join(tcpd, "datasets", name, f"{name}.json")
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            skipped.append(f"{name} (not in the repository)")
            continue
        d = json.load(open(path))
        if d["n_dim"] != 1:
            skipped.append(f"{name} (multivariate)")
            continue
        raw = [np.nan if v is None else float(v) for v in d["series"][0]["raw"]]
        series[name] = {"values": np.array(raw), "annotations": [list(v) for v in ann[name].values()]}
    return series, skipped


# ------------------------------------------------------------------------------ methods
def lockstep_binary(arg):
    if arg:
        return arg
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    for p in ("release", "debug"):
        b = os.path.join(target, p, "lockstep")
        if os.path.exists(b):
            return b
    sys.exit("no lockstep binary: build it (cargo build --release) or pass --lockstep")


def run_lockstep(binary, series, sql_args=""):
    tmp = tempfile.mkdtemp(prefix="lockstep-tcpd-")
    try:
        bundle = os.path.join(tmp, "bundle")
        os.makedirs(bundle)
        with open(os.path.join(bundle, "samples.csv"), "w") as f:
            f.write("time,host,metric,value\n")
            for name, s in series.items():
                for i, v in enumerate(s["values"]):
                    if np.isfinite(v):
                        f.write(f"{BASE_NS + i * STEP_NS},tcpd,{name},{float(v)!r}\n")
        db = os.path.join(tmp, "db")
        imp = subprocess.run([binary, "import", "--data-dir", db, bundle], capture_output=True, text=True)
        if imp.returncode != 0:
            sys.exit(f"lockstep import failed: {imp.stderr}")
        extra = f", {sql_args}" if sql_args else ""
        q = (f"SELECT metric, change_points(time, value{extra}) AS cps FROM samples "
             "GROUP BY metric")
        out = subprocess.run([binary, "sql", "--data-dir", db, "--format", "json", q],
                             check=True, capture_output=True, text=True).stdout
        found = {name: [] for name in series}
        for line in out.splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            found[row["metric"]] = [int(round((_ns(c["time"]) - BASE_NS) / STEP_NS))
                                    for c in (row["cps"] or [])]
        return found
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _ns(t):
    if isinstance(t, (int, float)):
        return int(t)
    # RFC 3339 text from the JSON writer
    import datetime as dt
    frac = "0"
    if "." in t:
        t, rest = t.split(".", 1)
        frac = "".join(ch for ch in rest if ch.isdigit())
    base = dt.datetime.strptime(t.rstrip("Z"), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.timezone.utc)
    return int(base.timestamp()) * 1_000_000_000 + int(frac.ljust(9, "0")[:9])


def standardised(v):
    v = v[np.isfinite(v)]
    sd = v.std()
    return (v - v.mean()) / (sd if sd > 0 else 1.0), np.flatnonzero(np.isfinite(v))


def run_ruptures(series, jump=1, kernel_max_n=None):
    """ruptures' Pelt, Binseg (l2) and KernelCPD (rbf) with the penalties in the module doc;
    `jump` = candidate spacing (1 = every sample; ruptures' own default is 5), or a function
    of the series length giving it. KernelCPD is skipped (no entry) on series longer than
    `kernel_max_n`: its memory grows as n² (12 GB at 39,000 samples)."""
    import ruptures as rpt

    out = {"ruptures Pelt l2": {}, "ruptures Binseg l2": {}, "ruptures KernelCPD rbf": {}}
    for name, s in series.items():
        raw = s["values"]
        keep = np.flatnonzero(np.isfinite(raw))
        x = raw[keep]
        sd = x.std()
        x = ((x - x.mean()) / (sd if sd > 0 else 1.0)).reshape(-1, 1)
        n = len(x)
        step = jump(n) if callable(jump) else jump
        d = np.diff(x[:, 0])
        sigma = 1.4826 * np.median(np.abs(d - np.median(d))) / np.sqrt(2) if n > 2 else 1.0
        sigma = sigma if sigma > 0 else 1.0
        pen_l2 = np.log(n) * 1 * sigma ** 2
        algos = {
            "ruptures Pelt l2": lambda: rpt.Pelt(model="l2", min_size=2, jump=step).fit(x).predict(pen=pen_l2),
            "ruptures Binseg l2": lambda: rpt.Binseg(model="l2", min_size=2, jump=step).fit(x).predict(pen=pen_l2),
            "ruptures KernelCPD rbf": lambda: rpt.KernelCPD(kernel="rbf", min_size=2, jump=step).fit(x).predict(pen=np.log(n)),
        }
        if kernel_max_n is not None and n > kernel_max_n:
            del algos["ruptures KernelCPD rbf"]
        for label, fn in algos.items():
            try:
                bk = fn()[:-1]
            except Exception:  # a failed fit reports no change
                bk = []
            out[label][name] = [int(keep[b]) for b in bk]
    return out


# ------------------------------------------------------------------------------ report
def boot(values, reps, rng):
    if not values:
        return (float("nan"), float("nan"))
    means = sorted(sum(rng.choice(values) for _ in values) / len(values) for _ in range(reps))
    return means[int(0.025 * reps)], means[int(0.975 * reps) - 1]


def print_table(title, names, methods, scores, reps, rng):
    """One Markdown table: mean F1 and cover over `names` per method, with bootstrap CIs.
    `scores[method][name]` is `(f1, cover, number of changes)`."""
    print(f"### {title}: {len(names)} series\n")
    print("| method | F1 | F1 95 % CI | cover | cover 95 % CI | mean changes |")
    print("|---|---:|---|---:|---|---:|")
    for m in methods:
        fs = [scores[m][n][0] for n in names]
        cs = [scores[m][n][1] for n in names]
        ks = [scores[m][n][2] for n in names]
        flo, fhi = boot(fs, reps, rng)
        clo, chi = boot(cs, reps, rng)
        print(f"| {m} | {np.mean(fs):.3f} | {flo:.3f}-{fhi:.3f} | {np.mean(cs):.3f} | "
              f"{clo:.3f}-{chi:.3f} | {np.mean(ks):.1f} |")
    print()


def report_series(args, methods, scores, columns, rows):
    """`--per-series` table (the `columns` of each of `rows`, `(name, cells)`, then each method's
    `F1/number of changes`) and the `--json` file (per method and series: F1, cover, changes)."""
    if args.per_series:
        print("| series | " + " | ".join(list(columns) + list(methods)) + " |")
        print("|---|" + "---:|" * (len(columns) + len(methods)))
        for name, cells in rows:
            print(f"| {name} | " + " | ".join([str(c) for c in cells] + [
                f"{scores[m][name][0]:.2f}/{scores[m][name][2]}" if name in scores[m] else "not run"
                for m in methods]) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({m: {n: {"f1": v[0], "cover": v[1], "found": methods[m][n]} for n, v in s.items()}
                       for m, s in scores.items()}, f, indent=1)


def parse_args(doc, data_arg):
    """The command line shared by the change-point benches."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(data_arg)
    ap.add_argument("--lockstep")
    ap.add_argument("--variant", action="append", default=[])
    ap.add_argument("--no-ruptures", action="store_true")
    ap.add_argument("--boot", type=int, default=2000)
    ap.add_argument("--json")
    ap.add_argument("--per-series", action="store_true")
    return ap.parse_args()


def run_methods(series, args, binary, jump=1, kernel_max_n=None):
    """Change points per method and series: zero, Lockstep (default and each variant), ruptures."""
    methods = {"zero (no change)": {name: [] for name in series}}
    methods["Lockstep change_points"] = run_lockstep(binary, series)
    for v in args.variant:
        label, _, sql_args = v.partition("=")
        methods[f"Lockstep {label}"] = run_lockstep(binary, series, sql_args)
    if not args.no_ruptures:
        methods.update(run_ruptures(series, jump, kernel_max_n))
    return methods


def main():
    args = parse_args(__doc__, "tcpd")
    series, skipped = load(args.tcpd)
    binary = lockstep_binary(args.lockstep)
    methods = run_methods(series, args, binary)

    scores = {m: {} for m in methods}
    for m, found in methods.items():
        for name, s in series.items():
            n = len(s["values"])
            scores[m][name] = (f1(s["annotations"], found[name]), cover(s["annotations"], found[name], n),
                               len(found[name]))

    groups = {
        "eval half (real)": [n for n in series if family(n) != "synthetic" and half(n) == "eval"],
        "tune half (real)": [n for n in series if family(n) != "synthetic" and half(n) == "tune"],
        "all real": [n for n in series if family(n) != "synthetic"],
        "quality control (synthetic)": [n for n in series if family(n) == "synthetic"],
    }
    rng = random.Random(17)
    print(f"TCPD: {len(series)} univariate series; skipped: {', '.join(skipped) or 'none'}")
    print(f"lockstep binary: {binary}\n")
    for g, names in groups.items():
        print_table(g, names, methods, scores, args.boot, rng)
    fams = sorted({family(n) for n in series} - {"synthetic"})
    print("### F1 by family (all real series)\n")
    print("| method | " + " | ".join(f"{f} ({sum(family(n) == f for n in series)})" for f in fams) + " |")
    print("|---|" + "---:|" * len(fams))
    for m in methods:
        cells = [np.mean([scores[m][n][0] for n in series if family(n) == f]) for f in fams]
        print(f"| {m} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    print()
    report_series(args, methods, scores, ["half"], [(n, [half(n)]) for n in series])


if __name__ == "__main__":
    main()
