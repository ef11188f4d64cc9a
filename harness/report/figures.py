"""The report's plots, drawn with matplotlib's Agg backend and returned as inline SVG text.

Text is drawn as paths (no fonts needed by the reader) and the XML prolog is dropped, so each
figure can sit inside the HTML as it is: no files, no URLs.
"""

from __future__ import annotations

import io
import math
import re

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["text.parse_math"] = False  # labels are data (cell ids): a `$` is a dollar, not TeX
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first
from matplotlib.patches import Patch  # noqa: E402

from harness.redact import redact_text  # noqa: E402
from harness.report.data import Cell, Pair, Stat  # noqa: E402

FP8_COLOR, NVFP4_COLOR, DECODE_COLOR, AGG_COLOR = "#4c72b0", "#dd8452", "#55a868", "#8172b3"
_PROLOG = re.compile(r"^.*?(?=<svg\b)", re.DOTALL)


def _svg(fig, name: str) -> str:
    buf = io.StringIO()
    # A per-figure salt keeps the element ids of two inline SVGs from colliding.
    with plt.rc_context({"svg.hashsalt": name, "svg.fonttype": "path"}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    return _PROLOG.sub("", buf.getvalue(), count=1)


def _err(stats: list[Stat | None]) -> list[list[float]]:
    """Asymmetric error bars from the min and max of the repeats (zero where there is one)."""
    def bar(d: float) -> float:  # a stored figure outside its repeats' range (an edited run) draws no bar
        return d if math.isfinite(d) and d > 0 else 0.0

    lo = [bar(s.value - s.lo) if s else 0.0 for s in stats]
    hi = [bar(s.hi - s.value) if s else 0.0 for s in stats]
    return [lo, hi]


def _hbars(ax, labels: list[str], stats: list[Stat | None], color: str, title: str) -> None:
    values = [s.value if s else 0.0 for s in stats]
    y = list(range(len(labels)))
    ax.barh(y, values, xerr=_err(stats), color=color, capsize=3, ecolor="#333333")
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("tok/s", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    for yi, s in zip(y, stats, strict=True):
        ax.text(s.hi if s else 0.0, yi, f" {s.value:.1f}" if s else " n/a", va="center", fontsize=7)


def decode(cells: tuple[Cell, ...]) -> str | None:
    """Per-stream decode at c=1 and aggregate at the highest concurrency, one bar per cell."""
    measured = [c for c in cells if c.per_stream_c1 or c.aggregate]
    if not measured:
        return None
    labels = [redact_text(c.id) for c in measured]
    tops = sorted({c.top_concurrency for c in measured if c.top_concurrency})
    top = "c=" + "/".join(str(t) for t in tops) if tops else "top c"
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 1.2 + 0.45 * len(measured)), sharey=True)
    _hbars(
        left,
        labels,
        [c.per_stream_c1 for c in measured],
        DECODE_COLOR,
        "decode per stream at c=1 (bars: min-max of repeats)",
    )
    _hbars(
        right,
        labels,
        [c.aggregate for c in measured],
        AGG_COLOR,
        f"aggregate decode at highest concurrency ({top})",
    )
    fig.tight_layout()
    return _svg(fig, "decode")


def fp8_vs_nvfp4(pairs: tuple[Pair, ...]) -> str | None:
    """FP8 and NVFP4 per-stream decode side by side for each stack/config, ratio on top."""
    drawn = [(p, f8, f4) for p in pairs if (f8 := p.fp8.per_stream_c1) and (f4 := p.nvfp4.per_stream_c1)]
    if not drawn:
        return None
    fig, ax = plt.subplots(figsize=(max(4.5, 2.2 * len(drawn)), 3.2))
    width = 0.38
    for i, (p, f8, f4) in enumerate(drawn):
        for dx, s, color in ((-width / 2, f8, FP8_COLOR), (width / 2, f4, NVFP4_COLOR)):
            ax.bar(
                i + dx,
                s.value,
                width,
                color=color,
                yerr=[[s.value - s.lo], [s.hi - s.value]],
                capsize=3,
                ecolor="#333333",
            )
        top = max(f8.hi, f4.hi)
        mark = f"{p.ratio:.2f}x {p.verdict}" if p.ratio is not None else p.verdict
        ax.text(
            i,
            top * 1.03,
            mark,
            ha="center",
            fontsize=9,
            color="#b00020" if p.verdict.startswith("FAIL") else "#1b5e20",
        )
    ax.set_xticks(
        range(len(drawn)), [redact_text(f"{p.stack}\n{p.config}") for p, _, _ in drawn], fontsize=8
    )
    ax.set_ylabel("decode tok/s per stream, c=1", fontsize=9)
    ax.set_ylim(0, max(max(f8.hi, f4.hi) for _, f8, f4 in drawn) * 1.18)
    ax.legend(
        handles=[Patch(color=FP8_COLOR, label="FP8"), Patch(color=NVFP4_COLOR, label="NVFP4")],
        fontsize=8,
        loc="lower right",
    )
    rule = drawn[0][0].min_ratio
    ax.set_title(
        "NVFP4 vs FP8" + (f" (rule: NVFP4 >= {rule:g} x FP8)" if rule else ""), fontsize=10
    )
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _svg(fig, "fp8nvfp4")


def roofline(cells: tuple[Cell, ...]) -> str | None:
    """Per-stream decode at c=1 as a share of the weight-bandwidth roofline."""
    known = [(c, e) for c in cells if (e := c.efficiency_c1) is not None]
    if not known:
        return None
    fig, ax = plt.subplots(figsize=(11, 1.0 + 0.4 * len(known)))
    y = list(range(len(known)))
    ax.barh(y, [100 * e for _, e in known], color="#64b5cd")
    ax.set_yticks(y, [redact_text(c.id) for c, _ in known], fontsize=8)
    ax.invert_yaxis()
    ax.axvline(100, color="#b00020", lw=1)
    ax.set_xlabel("% of roofline (c=1)", fontsize=9)
    ax.set_title("roofline efficiency: active weight bytes/token x tok/s / bandwidth", fontsize=10)
    for yi, (_, e) in zip(y, known, strict=True):
        ax.text(
            100 * e, yi, f" {100 * e:.0f}%", va="center", fontsize=7
        )
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return _svg(fig, "roofline")
