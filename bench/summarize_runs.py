#!/usr/bin/env python3
"""Several full kvpeer-bench runs side by side (docs/performance.md, "Results").

Usage: summarize_runs.py RUN.json [RUN.json ...] [--id FIGURE_ID ...]

Prints a Markdown table: one row per figure that has a target in the runs
(and each --id given), one column per run with the figure's value (for a
figure measured several times within a run, its median and, in brackets,
that run's interquartile range), then the median over the runs and in how
many runs the target was met. Python 3 standard library only.
"""

import argparse
import json
import statistics
import sys


def fmt(value):
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:.0f}"
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:.3g}"


def cell(figure):
    """A run's figure: its value, its ratio to its baseline when it has one,
    and its spread when it was measured several times."""
    text = f"{fmt(figure['value'])} {figure['unit']}"
    if figure.get("ratio") is not None:
        text += f" ({fmt(figure['ratio'])}x)"
    spread = figure.get("spread")
    if spread:
        text += f" [IQR {fmt(spread['q1'])}..{fmt(spread['q3'])}, n={spread['count']}]"
    return text


def judged(figure):
    """What the target is checked on: the ratio when there is a baseline."""
    return figure["ratio"] if figure.get("ratio") is not None else figure["value"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--id", action="append", default=[], dest="ids")
    args = parser.parse_args()
    runs = []
    for path in args.runs:
        with open(path, encoding="utf-8") as f:
            runs.append({fig["id"]: fig for fig in json.load(f)["figures"]})
    order = []
    for run in runs:
        for fid, fig in run.items():
            if fid not in order and (fig.get("target") is not None or fid in args.ids):
                order.append(fid)
    header = ["figure", "target"] + [f"run {i + 1}" for i in range(len(runs))] + ["median of runs", "met"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for fid in order:
        present = [run[fid] for run in runs if fid in run]
        first = present[0]
        cells = [cell(run[fid]) if fid in run else "-" for run in runs]
        values = [judged(fig) for fig in present]
        median = statistics.median(values)
        met = [fig["met"] for fig in present if fig.get("met") is not None]
        met_text = f"{sum(met)} of {len(met)}" if met else "-"
        unit = "x" if first.get("ratio") is not None else first["unit"]
        target = first.get("target") or "-"
        print(f"| {first['name']} | {target} | " + " | ".join(cells) + f" | {fmt(median)} {unit} | {met_text} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
