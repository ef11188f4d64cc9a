"""report.md and report.html of one run directory, written whole (harness.results.store)."""

from __future__ import annotations

from pathlib import Path

from harness.report import figures, html, markdown
from harness.report.data import load
from harness.report.sections import FigureKey, header, sections
from harness.results.store import atomic_write_text


def write_report(run_dir: str | Path, out_dir: str | Path | None = None) -> tuple[Path, Path]:
    """Write report.md and report.html into out_dir (default: the run dir); return both paths."""
    report = load(run_dir)
    out = Path(out_dir) if out_dir is not None else Path(run_dir)
    out.mkdir(exist_ok=True)  # one level: `harness report` checked its folder exists
    head, secs = header(report), sections(report)
    figs: dict[FigureKey, str | None] = {
        "decode": figures.decode(report.cells),
        "fp8_vs_nvfp4": figures.fp8_vs_nvfp4(report.pairs),
        "roofline": figures.roofline(report.cells),
    }
    md_path, html_path = out / "report.md", out / "report.html"
    atomic_write_text(md_path, markdown.render(head, secs))
    atomic_write_text(html_path, html.render(head, secs, figs))
    return md_path, html_path
