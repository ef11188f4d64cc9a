"""`harness report`: report.md and a self-contained report.html for one run directory.

Pipeline: data.load (run dir -> frozen rows) -> figures (inline SVG) -> sections (table text)
-> markdown / html writers. Everything shown passes harness.redact.redact_text.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from harness.report import figures, html, markdown
from harness.report.data import Report, load
from harness.report.sections import header, sections

__all__ = ["Report", "load", "write_report"]


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(run_dir: str | Path, out_dir: str | Path | None = None) -> tuple[Path, Path]:
    """Write report.md and report.html into out_dir (default: the run dir); return both paths."""
    report = load(run_dir)
    out = Path(out_dir) if out_dir is not None else Path(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    head, secs = header(report), sections(report)
    figs = {
        "decode": figures.decode(report.cells),
        "fp8_vs_nvfp4": figures.fp8_vs_nvfp4(report.pairs),
        "roofline": figures.roofline(report.cells),
    }
    md_path, html_path = out / "report.md", out / "report.html"
    _write_atomic(md_path, markdown.render(head, secs))
    _write_atomic(html_path, html.render(head, secs, figs))
    return md_path, html_path
