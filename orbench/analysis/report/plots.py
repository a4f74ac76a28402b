"""The report's figures (matplotlib, Agg backend): hard-vs-toxic scatter and per-category heatmap."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from orbench.analysis.stats import MIN_CELL_N


class _Labels:
    """Greedy label placement: each label takes the first nearby spot that overlaps no earlier label."""

    # (dx, dy) offsets in points from the marker, with the horizontal alignment they need
    SPOTS = [(5, 3, "left"), (5, -9, "left"), (-5, 3, "right"), (-5, -9, "right"), (5, 11, "left"),
             (5, -17, "left"), (-5, 11, "right"), (-5, -17, "right"), (0, 14, "center"), (0, -22, "center")]

    def __init__(self, ax):
        self.ax = ax
        self.boxes: list[tuple[float, float, float, float]] = []
        self.scale = ax.figure.dpi / 72

    def add(self, x: float, y: float, text: str, fontsize: float, **style) -> None:
        px, py = self.ax.transData.transform((x, y))
        w, h = len(text) * fontsize * 0.56 * self.scale, fontsize * 1.15 * self.scale
        choice = None
        for dx, dy, ha in self.SPOTS:
            left = px + dx * self.scale - {"left": 0, "right": w, "center": w / 2}[ha]
            box = (left, py + dy * self.scale, left + w, py + dy * self.scale + h)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in self.boxes):
                choice = (dx, dy, ha, box)
                break
        dx, dy, ha, box = choice or (5, 3, "left", (px, py, px + w, py + h))
        self.boxes.append(box)
        # annotation_clip=False: every labelled point lies within the axes' limits (set before any label
        # is placed), so matplotlib's check of that at every draw could only cost time
        self.ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), ha=ha, va="bottom",
                         fontsize=fontsize, annotation_clip=False, **style)


def scatter(points: Sequence[dict], coeffs, rho: float | None, stem: Path, *, reference: Sequence[dict] = (),
            reference_fit=None, caption: str = "", without: Sequence[str] = (), pdf: bool = True) -> dict[str, Path]:
    """Your models in colour with their rates' error bars (and their quadratic fit); PNG + PDF (PNG only
    without ``pdf``). A model with no point rate on a set (``x_bounds``/``y_bounds``) is a hatched bar
    over its bounds.

    x is the share of safe prompts refused, y of unsafe prompts refused: OR-Bench's Hard-1K and
    Toxic (circles) and XSTest's safe and unsafe halves (squares, ``benchmark`` ``XSTest``).
    ``reference`` (the published models) is drawn first, as labelled grey points with its own
    quadratic fit, so your models sit on top of the paper's picture. ``without``: your models with
    no OR-Bench point, and why ('m5 (no toxic results)'), named where the fit is missing.
    """
    fig, ax = plt.subplots(figsize=(9, 7.2))
    # y from just below the lowest point (or interval) to 100: the published toxic rates all lie
    # above 60%, and a full 0-100 axis would crowd them into a band.
    lows = [r["y"] for r in reference] + [(p.get("y_bounds") or p["y_ci"])[0] for p in points]
    y_low = max(0.0, 10 * np.floor((min(lows) - 4) / 10)) if lows else 0.0
    ax.set_xlim(-2, 104)
    ax.set_ylim(y_low - 1, 102)
    labels = _Labels(ax)
    colours = plt.get_cmap("tab10")
    for i, p in enumerate(points):
        if p.get("x_bounds") or p.get("y_bounds"):
            _bounds_bar(ax, labels, p, colours(i % 10), len(points) <= 12)
            continue
        xerr = [[p["x"] - p["x_ci"][0]], [p["x_ci"][1] - p["x"]]]
        yerr = [[p["y"] - p["y_ci"][0]], [p["y_ci"][1] - p["y"]]]
        colour = colours(i % 10)
        marker = "s" if p.get("benchmark") == "XSTest" else "o"
        ax.errorbar(p["x"], p["y"], xerr=xerr, yerr=yerr, fmt=marker, markersize=8, capsize=3, color=colour,
                    elinewidth=1.2, alpha=0.95, zorder=4, label=p["model"] if len(points) <= 12 else None)
        labels.add(p["x"], p["y"], p["model"], fontsize=9, fontweight="bold", color=colour, zorder=5)
    if reference:
        _reference(ax, labels, reference, reference_fit)
    if coeffs is not None:
        fitted = [p for p in points if p.get("benchmark", "OR-Bench") == "OR-Bench" and p["x"] is not None
                  and p["y"] is not None]
        xs = np.linspace(min(p["x"] for p in fitted), max(p["x"] for p in fitted), 200)
        ax.plot(xs, np.polyval(coeffs, xs), "--", color="tab:blue", alpha=0.6, zorder=3,
                label="your models: quadratic fit")
    elif points:
        orbench_points = sum(1 for p in points if p.get("benchmark", "OR-Bench") == "OR-Bench"
                             and p["x"] is not None and p["y"] is not None)
        names = [w.split(" (")[0] for w in without[:3]]  # the models only: why is in the report's notes
        missing = f"; no point: {', '.join(names)}{', ...' if len(without) > 3 else ''}" if without else ""
        ax.text(0.98, 0.02, f"no fit over your models' OR-Bench points (needs >= 3, have {orbench_points}{missing})",
                transform=ax.transAxes, ha="right", va="bottom", fontsize=8, color="gray").set_in_layout(False)
    if points or reference:
        # "best" keeps the legend off the points (yours and the published ones). That puts it inside
        # the axes, where it cannot widen tight_layout's margins: left out of the layout, the layout
        # does not search for the spot once more (the search measures every label).
        ax.legend(loc="best", fontsize=8, framealpha=0.9).set_in_layout(False)
    _axes_text(ax, any(p.get("benchmark") == "XSTest" for p in points), rho)
    if reference and caption:
        fig.text(0.01, 0.005, "Grey: published results, " + caption, fontsize=6, color="0.35",
                 ha="left", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.03 if reference and caption else 0, 1, 1))
    fig.set_layout_engine(None)  # laid out once: saving need not lay it out again
    out = {"figure_png": stem.with_suffix(".png")}
    fig.savefig(out["figure_png"], dpi=150)
    if pdf:
        out["figure_pdf"] = stem.with_suffix(".pdf")
        # Fixed metadata keeps the PDF free of a creation date.
        fig.savefig(out["figure_pdf"], metadata={"CreationDate": None})
    plt.close(fig)
    return out


def _bounds_bar(ax, labels: _Labels, p: dict, colour, legend: bool) -> None:
    """A model with no point rate on a set (too many rows without a verdict): a hatched bar over
    its bounds on that axis, as thick as the other set's interval (or bounds), never a point."""
    from matplotlib.patches import Rectangle

    (x0, x1), (y0, y1) = p.get("x_bounds") or p["x_ci"], p.get("y_bounds") or p["y_ci"]
    width, height = max(x1 - x0, 0.8), max(y1 - y0, 0.8)
    ax.add_patch(Rectangle((x0, y0), width, height, facecolor=colour, edgecolor=colour, alpha=0.3, hatch="//",
                           lw=1.5, zorder=3, label=f"{p['model']} (bounds: no rate)" if legend else None))
    labels.add(x0 + width / 2, y0 + height / 2, f"{p['model']} (bounds)", fontsize=9, fontweight="bold",
               color=colour, zorder=5)


def _reference(ax, labels: _Labels, reference: Sequence[dict], reference_fit) -> None:
    """The published models: labelled grey points and their quadratic fit, under your models."""
    rx = np.array([r["x"] for r in reference])
    ry = np.array([r["y"] for r in reference])
    ax.scatter(rx, ry, s=22, color="0.62", zorder=2, label=f"published ({len(reference)} models)")
    if reference_fit is not None:
        xs = np.linspace(rx.min(), rx.max(), 200)
        ax.plot(xs, np.polyval(reference_fit, xs), "-", color="0.55", lw=1.2, alpha=0.8, zorder=1,
                label="published: quadratic fit")
    for r in sorted(reference, key=lambda r: (-r["y"], r["x"])):
        labels.add(r["x"], r["y"], r["model"], fontsize=5.5, color="0.4", zorder=2)


def _axes_text(ax, xstest: bool, rho: float | None) -> None:
    """Axis labels (XSTest's halves named when drawn), the title with Spearman's rho, the grid."""
    ax.set_xlabel("Safe prompts refused (%): OR-Bench-Hard-1K" + (" (circles), XSTest safe (squares)"
                                                                 if xstest else " (seemingly toxic)"), fontsize=11)
    ax.set_ylabel("Unsafe prompts refused (%): OR-Bench-Toxic" + (", XSTest unsafe" if xstest else ""),
                  fontsize=11)
    title = "Over-refusal vs. safety (95% Clopper-Pearson intervals)"
    if rho is not None:
        title += f"; Spearman rho = {rho:.3f}"
    # y given: matplotlib then skips looking, at every draw, for a top axis or an offset text the title
    # would have to clear (this axes has neither), and puts it where it would have put it
    ax.set_title(title, fontsize=11, y=1.0)
    ax.grid(True, linestyle="--", alpha=0.5)


def heatmap_grid(cells: pd.DataFrame, sets: Sequence[str]) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """What the heatmap draws: rates in % and n per "model (set)" row and category column, and
    the mask of cells greyed for having fewer than ``MIN_CELL_N`` scored prompts (``prompts``:
    with repeated samples a prompt counts once, not once per sample)."""
    cells = cells.assign(row=cells["model"] + " (" + cells["set"] + ")",
                         order=cells["set"].map({s: i for i, s in enumerate(sets)}))
    rows = list(dict.fromkeys(cells.sort_values(["order", "model"])["row"]))
    cols = sorted(cells["category"].unique())
    grid = cells.pivot_table(index="row", columns="category", values="rate", aggfunc="first")
    grid = grid.reindex(index=rows, columns=cols) * 100
    n = "prompts" if "prompts" in cells.columns else "scored"  # repeated samples: a prompt counts once
    counts = cells.pivot_table(index="row", columns="category", values=n, aggfunc="first")
    counts = counts.reindex(index=rows, columns=cols)
    return grid, counts, counts.to_numpy(dtype=float) < MIN_CELL_N


def heatmap(cells: pd.DataFrame, sets: Sequence[str], path: Path) -> Path:
    """Rows = model (set), columns = categories, colour = rejection rate %, each cell with its n.

    A cell with fewer than ``MIN_CELL_N`` scored prompts is grey (its rate and n still written),
    so a 50% from 1 of 2 prompts is not painted like a 50% from 500; empty cells are blank grey; a
    cell with no point rate (too many rows without a verdict) is grey with its bounds written.
    """
    grid, counts, few = heatmap_grid(cells, sets)
    rows, cols = list(grid.index), list(grid.columns)
    values = grid.to_numpy(dtype=float)
    fig, ax = plt.subplots(figsize=(max(6, 1.0 * len(cols) + 3), max(2.5, 0.55 * len(rows) + 1.8)))
    # one quad per cell (an image would be resampled to the whole figure's pixels in floats:
    # 100+ MB for 30 models); masked cells let the grey background show
    ax.set_facecolor("lightgrey")
    im = ax.pcolormesh(np.arange(len(cols) + 1) - 0.5, np.arange(len(rows) + 1) - 0.5,
                       np.ma.masked_where(np.isnan(values) | few, values), cmap=matplotlib.colormaps["Reds"],
                       vmin=0, vmax=100)
    ax.set_xlim(-0.5, len(cols) - 0.5)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # first row on top
    ax.set_xticks(range(len(cols)), cols, rotation=40, ha="right", fontsize=9)
    ax.set_yticks(range(len(rows)), rows, fontsize=9)
    bounds = {}
    if "rate_bound_low" in cells.columns:  # cells with no point rate: their bounds, written, never coloured
        keyed = cells.assign(row=cells["model"] + " (" + cells["set"] + ")")
        for r in keyed[keyed["rate_bound_low"].notna()].itertuples(index=False):
            bounds[(r.row, r.category)] = (100 * r.rate_bound_low, 100 * r.rate_bound_high)
    for i in range(len(rows)):
        for j in range(len(cols)):
            v, n = grid.iat[i, j], counts.iat[i, j]
            if (rows[i], cols[j]) in bounds:
                lo, hi = bounds[(rows[i], cols[j])]
                ax.text(j, i, f"no rate\n{lo:.0f}-{hi:.0f}", ha="center", va="center", fontsize=6.5,
                        color="0.25").set_in_layout(False)
                continue
            if np.isnan(v) or np.isnan(n):
                continue
            colour = "0.35" if few[i, j] else ("white" if v > 60 else "black")
            ax.text(j, i, f"{v:.0f}\nn={int(n)}", ha="center", va="center", fontsize=7,
                    color=colour).set_in_layout(False)  # inside its cell: no need to measure it for the layout
    fig.colorbar(im, ax=ax, label="rejection rate (%)")
    ax.set_title(f"Rejection rate by category (grey: n < {MIN_CELL_N} prompts)", y=1.0)  # y: as the scatter's
    fig.tight_layout()
    fig.set_layout_engine(None)  # laid out once: saving need not lay it out again (a draw less)
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path
