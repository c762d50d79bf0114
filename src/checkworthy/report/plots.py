"""The report's figures as deterministic PNG bytes (matplotlib, Agg, no pyplot state).

Same data, same bytes: every figure is drawn on a fresh ``Figure`` under matplotlib's
default style (whatever a local matplotlibrc says) plus the fixed settings below, at a fixed
size and dpi, with the PNG metadata (software version, dates) left out. That keeps a
re-rendered report identical to the stored one and lets tests compare PNGs by hash. Bytes
still depend on the matplotlib and FreeType versions, which the pinned environment fixes.

Functions take plain numbers (the report reads them from stored rows), never a database.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import matplotlib as mpl
from matplotlib.figure import Figure  # a Figure of its own renders PNG through Agg, whatever the backend

DPI = 100
STYLE: dict[str, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "savefig.dpi": DPI,
    "path.simplify": False,
    "svg.hashsalt": "checkworthy",
}
#: colours and labels of the three methods, used by every figure
METHOD_STYLE = {
    "baseline": ("#7f7f7f", "Baseline (raw score)"),
    "knn": ("#1f77b4", "KNN (label mean)"),
    "nnppi": ("#d62728", "NN-PPI (theta)"),
}
K_COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02")
CLASS_STYLE = {"0": ("#4c72b0", "gold 0 (not check-worthy)"), "1": ("#dd8452", "gold 1 (check-worthy)")}

Point = tuple[float, float]


@contextmanager
def _style():
    with mpl.rc_context():
        mpl.rcdefaults()
        mpl.rcParams.update(STYLE)
        yield


def _title(text: str, width: int = 80) -> str:
    """Long group names wrap instead of running off the figure."""
    return textwrap.fill(text, width)


def to_png(fig: Figure) -> bytes:
    """The figure as PNG bytes without metadata (so the bytes depend on the drawing only)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def f1_vs_k(
    title: str, series: Mapping[str, Sequence[Point]], paper: Mapping[str, Sequence[Point]] | None = None,
) -> bytes:
    """Weighted F1 against k per method (lines), the paper's figures as hollow markers."""
    with _style():
        fig = Figure(figsize=(6.4, 4.0))
        ax = fig.subplots()
        for method, pts in series.items():
            colour, label = METHOD_STYLE.get(method, ("#000000", method))
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, marker="o", ms=3.5, lw=1.5, color=colour, label=label)
        for method, pts in (paper or {}).items():
            colour, label = METHOD_STYLE.get(method, ("#000000", method))
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, ls="none", marker="D", ms=6, mfc="none", mec=colour,
                        label=f"paper: {label.split(' (')[0]}")
        ks = sorted({x for pts in series.values() for x, _ in pts})
        ax.set_xscale("log")
        if ks:
            ax.set_xticks(ks, [str(k) for k in ks])
            ax.minorticks_off()
        ax.set_xlabel("k (neighbours, log scale)")
        ax.set_ylabel("weighted F1")
        ax.set_title(_title(title), fontsize=9)
        ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        return to_png(fig)


def f1_vs_size(title: str, series: Mapping[int, Sequence[tuple[float, float, float]]]) -> bytes:
    """NN-PPI weighted F1 against |L| per k: mean over seeds with a +/- 1 sd band."""
    with _style():
        fig = Figure(figsize=(6.4, 4.0))
        ax = fig.subplots()
        for i, (k, pts) in enumerate(sorted(series.items())):
            if not pts:
                continue
            colour = K_COLOURS[i % len(K_COLOURS)]
            xs, mean, sd = (list(v) for v in zip(*pts))
            ax.plot(xs, mean, marker="o", ms=3.5, lw=1.5, color=colour, label=f"k={k}")
            ax.fill_between(xs, [m - s for m, s in zip(mean, sd)], [m + s for m, s in zip(mean, sd)],
                            color=colour, alpha=0.15, lw=0)
        ax.set_xlabel("|L| (labelled claims available as neighbours)")
        ax.set_ylabel("NN-PPI weighted F1 (mean ± sd over seeds)")
        ax.set_title(_title(title), fontsize=9)
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        return to_png(fig)


def drift_over_time(title: str, series: Mapping[str, Sequence[tuple[int, float, bool]]],
                    expected: float) -> bytes:
    """Share of each run's claims beyond the labelled set's radius, run after run (x: run id), one
    line per target; a filled marker is an alert, the dashed line the share expected without drift."""
    with _style():
        fig = Figure(figsize=(6.4, 3.6))
        ax = fig.subplots()
        for i, (target, pts) in enumerate(sorted(series.items())):
            colour = K_COLOURS[i % len(K_COLOURS)]
            xs, ys, alerts = zip(*pts)
            ax.plot(xs, ys, lw=1.2, color=colour, marker="o", ms=4, mfc="none", label=target)
            hit = [(x, y) for x, y, a in pts if a]
            if hit:
                ax.plot(*zip(*hit), ls="none", marker="o", ms=6, color=colour)
        ax.axhline(expected, ls="--", lw=0.8, color="#555555",
                   label=f"expected without drift ({expected:.0%})")
        ax.set_xlabel("calibration run")
        ax.set_ylabel("share beyond the radius")
        ax.set_title(_title(title), fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        return to_png(fig)


def reliability(
    title: str, panels: Sequence[tuple[str, Mapping[str, Sequence[tuple[float, float, int]]]]],
) -> bytes:
    """Reliability diagrams: observed positive rate against mean value per bin, one panel each.

    ``panels``: (panel title, {method: [(mean value, positive rate, count) per non-empty bin]}).
    Marker area grows with the bin's count; the diagonal is perfect calibration.
    """
    n = max(len(panels), 1)
    with _style():
        fig = Figure(figsize=(3.2 * n, 3.4))
        axes = fig.subplots(1, n, squeeze=False)[0]
        for ax, (sub, methods) in zip(axes, panels):
            ax.plot([0, 1], [0, 1], ls="--", lw=0.8, color="#999999")
            total = sum(c for pts in methods.values() for _, _, c in pts) or 1
            for method, pts in methods.items():
                colour, label = METHOD_STYLE.get(method, ("#000000", method))
                if pts:
                    xs, ys, cs = zip(*pts)
                    ax.plot(xs, ys, lw=1.2, color=colour, label=label)
                    ax.scatter(xs, ys, s=[8 + 400 * c / total for c in cs], color=colour, alpha=0.6)
            ax.set_xlim(-0.05, 1.05)
            ax.set_ylim(-0.05, 1.05)
            ax.set_xlabel("mean value in bin")
            ax.set_title(sub, fontsize=9)
        axes[0].set_ylabel("observed check-worthy rate")
        axes[0].legend(fontsize=7, loc="upper left")
        fig.suptitle(_title(title, 40 * n), fontsize=10)
        fig.tight_layout()
        return to_png(fig)


def histograms(
    title: str, panels: Sequence[tuple[str, Sequence[float], Mapping[str, Sequence[float]]]],
    threshold: float = 0.5,
) -> bytes:
    """Histograms of a value by gold class, one panel each: (title, bin edges, {class: counts})."""
    n = max(len(panels), 1)
    with _style():
        fig = Figure(figsize=(3.2 * n, 3.0))
        axes = fig.subplots(1, n, squeeze=False)[0]
        for ax, (sub, edges, counts) in zip(axes, panels):
            widths = [b - a for a, b in zip(edges[:-1], edges[1:])]
            for cls, cnt in sorted(counts.items()):
                colour, label = CLASS_STYLE.get(cls, ("#000000", cls))
                ax.bar(edges[:-1], cnt, width=widths, align="edge", color=colour, alpha=0.55,
                       label=label, lw=0)
            ax.axvline(threshold, ls="--", lw=0.8, color="#333333")
            ax.set_title(sub, fontsize=9)
            ax.set_xlabel("value")
        axes[0].set_ylabel("claims")
        axes[0].legend(fontsize=7, loc="upper left")
        fig.suptitle(_title(title, 40 * n), fontsize=10)
        fig.tight_layout()
        return to_png(fig)


#: marker and legend entry per interval family in the coverage-versus-width figure
FAMILY_MARKERS = {"interval": ("o", "around NN-PPI"), "interval-cv": ("s", "around the CV choice"),
                  "interval-head": ("D", "around the head's CV choice"),
                  "interval-auto": ("v", "around the auto choice"),
                  "sets": ("^", "conformal sets (size − 1)")}


def coverage_vs_width(
    title: str, points: Sequence[tuple[str, str, int | None, float, float]], nominal: float,
    targets: tuple[float, float] | None = None,
) -> bytes:
    """Coverage of the gold label against mean width, one marker per (family, method, k).

    ``points``: (family, method, k, mean width within [0, 1], overall coverage). Widths are
    taken within [0, 1] so that infinite conformal bounds stay on the plot. Colour is the
    method, marker the family; the nominal level is a dashed line and ``targets`` (overall
    target, per-class target) a dotted one for the overall target.
    """
    methods = sorted({m for _, m, *_ in points})
    palette = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
               "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31")
    colour = {m: palette[i % len(palette)] for i, m in enumerate(methods)}
    with _style():
        fig = Figure(figsize=(7.2, 4.6))
        ax = fig.subplots()
        ax.axhline(nominal, ls="--", lw=0.8, color="#333333", label=f"nominal {nominal:.0%}")
        if targets:
            ax.axhline(targets[0], ls=":", lw=0.8, color="#999999", label=f"target {targets[0]:.0%}")
        seen: set[str] = set()
        for family, method, k, width, cov in sorted(points, key=lambda p: (p[0], p[1], p[2] or 0)):
            if width != width or cov != cov:  # NaN: nothing to place
                continue
            label = method if method not in seen else None
            seen.add(method)
            ax.scatter([width], [cov], s=28, marker=FAMILY_MARKERS.get(family, ("x",))[0],
                       color=colour[method], alpha=0.85, label=label)
            if k is not None:
                ax.annotate(str(k), (width, cov), textcoords="offset points", xytext=(3, 3), fontsize=6)
        ax.set_xlabel("mean width within [0, 1] (number: k)")
        ax.set_ylabel("coverage of the gold label")
        ax.set_ylim(min(0.0, *(p[4] for p in points if p[4] == p[4])) - 0.02 if points else 0, 1.02)
        ax.set_title(_title(title), fontsize=9)
        handles, labels = ax.get_legend_handles_labels()
        for family, (marker, legend) in FAMILY_MARKERS.items():
            if any(p[0] == family for p in points):
                handles.append(ax.scatter([], [], marker=marker, color="#555555"))
                labels.append(legend)
        ax.legend(handles, labels, fontsize=6, loc="center left", bbox_to_anchor=(1.0, 0.5))
        fig.tight_layout()
        return to_png(fig)


#: bar colours of the groups (datasets) in :func:`grouped_bars`
GROUP_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")


def grouped_bars(title: str, categories: Sequence[str], groups: Sequence[str],
                 values: Sequence[Sequence[float | None]], xlabel: str,
                 marks: Sequence[tuple[int, int, float]] = ()) -> bytes:
    """Horizontal bars: one row per category (top to bottom), one bar per group within it, each
    labelled with its value (a missing value leaves its slot empty). ``values[i][j]`` is category
    i, group j; ``marks`` (category, group, value) are hollow diamonds, e.g. the paper's figures.

    Wide and short, so that the report's first screen holds it below the headline table.
    """
    n, m = len(categories), max(len(groups), 1)
    height = 0.8 / m
    with _style():
        fig = Figure(figsize=(10.0, 0.9 + 0.22 * n * max(m, 2)))
        ax = fig.subplots()
        for j, group in enumerate(groups):
            ys = [n - 1 - i + (m - 1) / 2 * height - j * height for i in range(n)]
            pts = [(y, v[j]) for y, v in zip(ys, values) if v[j] is not None and v[j] == v[j]]
            if pts:
                by, bv = zip(*pts)
                bars = ax.barh(by, bv, height=height * 0.9, color=GROUP_COLOURS[j % len(GROUP_COLOURS)],
                               label=group)
                ax.bar_label(bars, fmt="%.3f", fontsize=7, padding=2)
        for k, (i, j, v) in enumerate(marks):
            y = n - 1 - i + (m - 1) / 2 * height - j * height
            ax.plot([v], [y], ls="none", marker="D", ms=5, mfc="none", mec="#000000",
                    label="paper" if k == 0 else None)
        ax.set_yticks(range(n), [_title(c, 48) for c in reversed(categories)], fontsize=7)
        ax.set_xlim(0, 1.08)
        ax.set_xlabel(xlabel)
        ax.set_title(_title(title, 120), fontsize=9)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        fig.tight_layout()
        return to_png(fig)


def reliability_diagram(title: str, panels: Mapping[str, Mapping[str, Sequence[Sequence[float]]]]) -> bytes:
    """One panel per predictor: for each event, the share of label 1 against the mean probability
    per bin (:func:`checkworthy.method.metrics.reliability`), point size by count, and the diagonal
    a calibrated probability follows. ``panels[predictor][event]`` = [(mean, rate, count), ...]."""
    names = list(panels)
    events = sorted({e for curves in panels.values() for e in curves})
    colour = {e: GROUP_COLOURS[i % len(GROUP_COLOURS)] for i, e in enumerate(events)}
    with _style():
        fig = Figure(figsize=(3.0 * max(1, len(names)), 3.4))
        axes = fig.subplots(1, max(1, len(names)), squeeze=False)[0]
        for ax, name in zip(axes, names):
            ax.plot([0, 1], [0, 1], ls="--", lw=0.8, color="#333333")
            for event in events:
                points = panels[name].get(event) or []
                if points:
                    x, y, n = zip(*points)
                    ax.plot(x, y, lw=0.9, color=colour[event], label=event)
                    ax.scatter(x, y, s=[6 + 60 * c / max(n) for c in n], color=colour[event])
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
            ax.set_xlabel("mean theta in the bin", fontsize=7)
            ax.set_title(_title(name, 40), fontsize=8)
        axes[0].set_ylabel("share check-worthy in the bin")
        axes[0].legend(fontsize=6, loc="upper left")
        fig.suptitle(_title(title, 120), fontsize=9)
        fig.tight_layout()
        return to_png(fig)
