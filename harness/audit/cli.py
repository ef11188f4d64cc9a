"""`harness audit PATH`: which GPU archs a build really holds, and what each target chip gets."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from rich.table import Table

from harness.audit.archs import CC
from harness.audit.families import FAMILIES, TITLES
from harness.audit.report import DEFAULT_TARGETS, AuditReport, audit_path
from harness.audit.scan import arch_sort_key
from harness.audit.verdict import FAIL, WARN, Target
from harness.console import err, out
from harness.errors import ConfigError

_STYLE = {"pass": "green", "warn": "yellow", "fail": "red", "skip": "dim"}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "audit",
        help="prove from the binaries which GPU archs were compiled (sm_120 vs sm_120f vs sm_121a)",
        description="Read every CUDA binary under PATH (directory, .whl, .so, .cubin, .fatbin, .o): "
        "cubins per arch with the a/f suffix, PTX, kernel families, and per target chip whether "
        "the kernels load and whether the NVFP4 GEMMs use the native block-scaled FP4 MMA.",
    )
    p.add_argument(
        "path",
        metavar="TARGET",
        help="directory (e.g. an exported site-packages), wheel, binary, or a Docker image "
        "(its Python packages are copied out; the container is not started)",
    )
    p.add_argument("--image", action="store_true", help="TARGET is an image even if a path of that name exists")
    p.add_argument("--image-path", metavar="DIR", help="the image's site-packages (default: try "
                   + ", ".join(IMAGE_PATHS) + ")")
    p.add_argument("--json", action="store_true", help="print the full report as JSON on stdout")
    p.add_argument(
        "--target-cc",
        action="append",
        metavar="CC",
        help="compute capability to judge for, repeatable (default: 12.0, 12.1, 9.0)",
    )
    p.add_argument(
        "--sass",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="disassemble the NVFP4 GEMM cubins a target would load (needs nvdisasm; default on)",
    )
    p.add_argument(
        "--top", type=int, default=10, metavar="N", help="files shown in the table (default 10)"
    )
    p.add_argument(
        "--fail-on",
        choices=("fail", "warn", "never"),
        default="fail",
        help="exit 1 when a verdict is at least this bad (default: fail)",
    )
    p.set_defaults(func=run)


def _targets(ccs: list[str] | None) -> list[Target]:
    if not ccs:
        return list(DEFAULT_TARGETS)
    try:
        return [Target.from_cc(str(CC.parse(c))) for c in ccs]
    except ValueError as exc:
        raise ConfigError(
            str(exc), hint="pass --target-cc like 12.1 (nvidia-smi --query-gpu=compute_cap)"
        ) from exc


# Where images keep their Python packages: our own Dockerfile's venv first, then the usual prefixes.
IMAGE_PATHS = ("/opt/venv/lib", "/usr/local/lib", "/usr/lib/python3/dist-packages")


def audit_image(ref: str, targets: list[Target], *, sass_check: bool, paths=IMAGE_PATHS) -> AuditReport:
    """Copy an image's Python packages out (the container is never started) and audit them."""
    import tempfile

    from harness.engine import connect
    from harness.errors import EngineError

    engine = connect()
    if engine.image_id(ref) is None:
        raise EngineError(f"no image {ref} on this engine", hint="build it (`harness build`) or pull/load it")
    labels = {"harness.role": "audit-export"}
    with tempfile.TemporaryDirectory(prefix="harness-audit-image-") as tmp:
        for path in paths:
            try:
                dest = engine.export_path(ref, path, Path(tmp) / path.strip("/").replace("/", "_"), labels)
            except EngineError:
                continue
            return audit_path(dest, targets, sass_check=sass_check)
    raise EngineError(f"{ref}: none of {', '.join(paths)} exists in the image",
                      hint="pass --image-path with the image's site-packages directory")


def _looks_like_image(target: str) -> bool:
    """`vllm-bw:spark-121a-…` or `nvidia/cuda:13.0.1-devel`, not a path that is missing."""
    if Path(target).exists() or target.startswith(("/", ".", "~")):
        return False
    return not target.endswith((".whl", ".so", ".cubin", ".fatbin", ".o"))


def run(args: argparse.Namespace) -> int:
    targets = _targets(args.target_cc)
    if args.image or _looks_like_image(args.path):
        paths = (args.image_path,) if args.image_path else IMAGE_PATHS
        report = audit_image(args.path, targets, sass_check=args.sass, paths=paths)
    else:
        report = audit_path(args.path, targets, sass_check=args.sass)
    if args.json:
        out.print_json(json.dumps(report.to_json()))
    else:
        render(report, top=args.top)
    for note in report.stats.notes:
        err.print(f"[yellow]note:[/yellow] {note}")
    bad = {"fail": {FAIL}, "warn": {FAIL, WARN}, "never": set()}[args.fail_on]
    return 1 if any(v.status in bad for v in report.verdicts) else 0


def render(report: AuditReport, top: int = 10) -> None:
    totals = report.totals()
    archs = sorted(totals, key=arch_sort_key)
    if not report.files:
        out.print(f"{report.root}: no CUDA code found ({report.stats.files_seen} files scanned)")
        return
    files = sorted(report.files, key=lambda f: -sum(f.cubins.values()))[:top]
    t = Table(title=f"cubins per arch — {report.root}", title_justify="left")
    t.add_column("file")
    for a in archs:
        t.add_column(a, justify="right")
    t.add_column("PTX")
    for f in files:
        t.add_row(
            f.path.rsplit("!", 1)[-1], *[_n(f.cubins.get(a, 0)) for a in archs], ",".join(f.ptx)
        )
    if len(report.files) > len(files):
        t.add_row(f"… {len(report.files) - len(files)} more", *[""] * len(archs), "")
    t.add_row(
        "[bold]total[/bold]", *[f"[bold]{totals[a]}[/bold]" for a in archs], ",".join(report.ptx())
    )
    out.print(t)

    fams = report.families()
    cols = sorted({a for c in fams.values() for a in c}, key=arch_sort_key)
    ft = Table(title="kernels per family and arch", title_justify="left")
    ft.add_column("family")
    for a in cols:
        ft.add_column(a, justify="right")
    for fam in FAMILIES:
        if fam in fams:
            c: Counter[str] = fams[fam]
            ft.add_row(TITLES[fam], *[_n(c.get(a, 0)) for a in cols])
    out.print(ft)

    vt = Table(title="verdicts", title_justify="left")
    vt.add_column("target")
    vt.add_column("status")
    vt.add_column("why")
    for v in report.verdicts:
        vt.add_row(f"{v.target.name} ({v.target.cc})", _status(v.status), v.message)
        for c in v.checks:
            if (c.status != "pass" or c.family == "nvfp4_gemm") and not v.message.startswith(
                c.message
            ):
                vt.add_row("", _status(c.status), f"[dim]{c.family}:[/dim] {c.message}")
    out.print(vt)
    sass = "SASS checked" if report.sass_checked else "SASS not checked"
    out.print(
        f"{len(report.files)} CUDA files of {report.stats.files_seen} scanned, "
        f"{report.stats.bytes_read / 2**20:.0f} MiB read, {report.stats.sass_cubins} cubins disassembled "
        f"({sass}), {report.elapsed_s:.1f} s"
    )


def _n(v: int) -> str:
    return str(v) if v else "[dim]·[/dim]"


def _status(s: str) -> str:
    return f"[{_STYLE[s]}]{s}[/{_STYLE[s]}]"
