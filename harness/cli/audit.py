"""`harness audit PATH`: which GPU archs a build really holds, and what each target chip gets."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.markup import escape
from rich.text import Text

from harness.archs import CC
from harness.audit.families import FAMILIES
from harness.audit.report import IMAGE_PATHS, AuditReport, audit_path
from harness.audit.scan import arch_sort_key
from harness.audit.verdict import FAIL, WARN, AuditStatus, Target
from harness.console import err, out
from harness.errors import ConfigError
from harness.labels import Role, role
from harness.safety import numbers
from harness.tables import Col, show

_STYLE: dict[AuditStatus, str] = {"pass": "green", "warn": "yellow", "fail": "red", "skip": "dim"}


EXIT_CODES = """exit codes:
  0  every verdict asked for passed (or only warned, with the default --fail-on fail)
  1  a verdict failed; a line on stderr says which and why. Also: no loadable CUDA code at
     all, or none in a file a stack requires to hold kernels (vLLM _C / _moe_C, FlashInfer
     AOT modules, bitsandbytes CUDA libraries)
  2  bad input: a missing path, a bad --cc, or an incomplete audit (a file or wheel member
     could not be read to the end: each is listed as "unreadable: <why>")
  3  this host cannot run it (e.g. nvdisasm failed while checking SASS)

Verdicts are given only for the chips asked for: --cc (repeatable) and/or the hardware of a
matrix (-m). Without either, the audit lists what was compiled and checks the files' integrity.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "audit",
        help="prove from the binaries which GPU archs were compiled (sm_120 vs sm_120f vs sm_121a)",
        description="Read every CUDA binary under PATH (directory, .whl, .so, .cubin, .fatbin, .o): "
        "cubins per arch with the a/f suffix, PTX, kernel families, relocatable (-rdc) code apart, "
        "and per target chip whether the kernels load and whether the NVFP4 GEMMs use the native "
        "block-scaled FP4 MMA. Nothing is extracted: wheel members are read as streams.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
        "--cc",
        "--target-cc",
        dest="target_cc",
        action="append",
        metavar="CC",
        help="compute capability to judge for, repeatable (e.g. --cc 12.1; "
        "nvidia-smi --query-gpu=compute_cap)",
    )
    p.add_argument(
        "-m",
        "--matrix",
        metavar="FILE",
        help="judge for the compute capability of this matrix's hardware (matrix.hardware)",
    )
    p.add_argument(
        "--sass",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="disassemble the NVFP4 GEMM cubins a target would load (needs nvdisasm; default on)",
    )
    p.add_argument(
        "--ptx-names",
        action="store_true",
        help="read the kernel names of every PTX entry (default: only PTX a target would JIT)",
    )
    p.add_argument(
        "--jobs", type=numbers.arg("--jobs", int, lo=1, hi=4096), metavar="N", help="worker processes (default: the CPU count)"
    )
    p.add_argument(
        "--top", type=numbers.arg("--top", int, lo=0, hi=1_000_000), default=10, metavar="N", help="files shown in the table (default 10)"
    )
    p.add_argument(
        "--fail-on",
        choices=("fail", "warn", "never"),
        default="fail",
        help="exit 1 when a verdict is at least this bad (default: fail)",
    )
    p.set_defaults(func=run)


def _targets(ccs: list[str] | None, matrix: str | None) -> list[Target]:
    out: list[Target] = []
    try:
        out += [Target.from_cc(str(CC.parse(c))) for c in ccs or []]
    except ValueError as exc:
        raise ConfigError(
            str(exc), hint="pass --cc like 12.1 (nvidia-smi --query-gpu=compute_cap)"
        ) from exc
    if matrix:
        from harness.matrix.load import load_matrix

        spec = load_matrix(matrix).spec
        hw = spec.hardware[spec.matrix.hardware]
        out.append(Target(f"{spec.matrix.hardware} ({CC.parse(hw.cc).sm})", hw.cc))
    first: dict[str, Target] = {}  # each capability once, the first named
    for t in out:
        first.setdefault(t.cc, t)
    return list(first.values())



def audit_image(ref: str, targets: list[Target], *, sass_check: bool, paths=IMAGE_PATHS, **kw) -> AuditReport:
    """Copy an image's Python packages out (the container is never started) and audit them: the
    vllm and FlashInfer packages where the image's build recorded its site-packages (an image
    `harness build` made), else the first of `paths` the image has."""
    import tempfile

    from harness.engine import connect
    from harness.errors import EngineError

    engine = connect()
    if engine.image_id(ref) is None:
        raise EngineError(f"no image {ref} on this engine", hint="build it (`harness build`) or pull/load it")
    labels = role(Role.AUDIT_EXPORT)
    with tempfile.TemporaryDirectory(prefix="harness-audit-image-") as tmp:
        if paths == IMAGE_PATHS:  # no --image-path: where the image's build said it installed vLLM
            from harness.image.builder import export_packages, image_site_packages, stack_packages

            site = image_site_packages(engine, ref, labels)
            if site is not None:
                vllm, also = stack_packages(site)
                try:
                    dest = export_packages(engine, ref, vllm, Path(tmp) / "site-packages", labels, also)
                except EngineError:
                    pass  # recorded but gone: the usual places below
                else:
                    return audit_path(dest, targets, sass_check=sass_check, **kw)
        for path in paths:
            try:
                dest = engine.export_path(ref, path, Path(tmp) / path.strip("/").replace("/", "_"), labels)
            except EngineError:
                continue
            return audit_path(dest, targets, sass_check=sass_check, **kw)
    raise EngineError(f"{ref}: none of {', '.join(paths)} exists in the image",
                      hint="pass --image-path with the image's site-packages directory")


def _looks_like_image(target: str) -> bool:
    """`vllm-bw:spark-121a-…` or `nvidia/cuda:13.0.1-devel`, not a path that is missing."""
    if Path(target).exists() or target.startswith(("/", ".", "~")):
        return False
    return not target.endswith((".whl", ".so", ".cubin", ".fatbin", ".o"))


def run(args: argparse.Namespace) -> int:
    targets = _targets(args.target_cc, args.matrix)
    kw = {"sass_check": args.sass, "jobs": args.jobs, "all_ptx": args.ptx_names}
    if args.image or _looks_like_image(args.path):
        paths = (args.image_path,) if args.image_path else IMAGE_PATHS
        report = audit_image(args.path, targets, paths=paths, **kw)
    else:
        report = audit_path(args.path, targets, **kw)
    if args.json:
        out.print_json(json.dumps(report.to_json()))
    else:
        render(report, top=args.top)
    for note in report.stats.notes:
        err.print(f"[yellow]note:[/yellow] {escape(note)}")
    if not targets:
        err.print("[dim]no target chip given: pass --cc 12.1 (repeatable) or -m MATRIX to judge "
                  "which kernels load and whether NVFP4 runs natively[/dim]")
    for line in report.failures():
        err.print(escape(line), style="red" if not line.startswith("unreadable") else "yellow")
    if not report.complete:
        err.print(f"[red]incomplete audit[/red]: {len(report.unreadable)} file(s) could not be read "
                  "to the end; no verdict covers them (exit 2)\n  fix: re-download or rebuild the "
                  "files listed as unreadable, then audit again")
        return 2
    bad = {"fail": {FAIL}, "warn": {FAIL, WARN}, "never": set()}[args.fail_on]
    statuses = [v.status for v in report.verdicts] + [p.status for p in report.problems]
    if args.fail_on == "warn":
        for v in report.verdicts:
            if v.status == WARN:
                err.print(escape(f"warn: {v.target.name} ({v.target.cc}): {v.message}"), style="yellow")
    return 1 if any(s in bad for s in statuses) else 0


def render(report: AuditReport, top: int = 10) -> None:
    """Tables on stdout, one row per arch (an image holds a dozen archs: as columns they were cut
    at 80 columns). Paths and messages come from the binaries: printed as text, never markup."""
    root = report.root
    loadable = [f for f in report.files if f.objects]
    if not loadable:
        out.print(f"{escape(root)}: no loadable CUDA code found ({report.stats.files_seen} files scanned)")
    else:
        totals = report.totals()
        archs = sorted(totals, key=arch_sort_key)
        fams = report.families()
        rows = []
        for a in archs:
            in_files = sum(1 for f in loadable if f.cubins[a])
            kinds = ", ".join(f"{fam}={fams[fam][a]}" for fam in FAMILIES if fams[fam][a])
            rows.append([Text(a), str(totals[a]), str(in_files), Text(kinds or "-")])
        show(out, f"cubins per arch — {root}",
             [Col("arch", whole=True), Col("cubins", justify="right"), Col("files", justify="right"),
              Col("kernels per family")], rows)
        ptx = report.ptx()
        if ptx:
            out.print(f"PTX (JIT-compiled at load): {', '.join(ptx)}", markup=False, soft_wrap=True)
        files = sorted(loadable, key=lambda f: -sum(f.cubins.values()))[:top]
        frows = [[Text(f.path.rsplit("!", 1)[-1]),
                  Text(", ".join(f"{a}={n}" for a, n in sorted(f.cubins.items(), key=lambda x: arch_sort_key(x[0])))),
                  Text(", ".join(f.ptx) or "-")] for f in files]
        if len(loadable) > len(files):
            frows.append([Text(f"({len(loadable) - len(files)} more: --top N)"), Text(""), Text("")])
        show(out, "files, most cubins first", [Col("file", whole=True), Col("cubins per arch"), Col("PTX")],
             frows)
    reloc = [f for f in report.files if f.relocatable]
    if reloc:
        show(out, "relocatable device code (__nv_relfatbin, -rdc): linked, never loaded as is",
             [Col("file", whole=True), Col("cubins"), Col("PTX")],
             [[Text(f.path.rsplit("!", 1)[-1]),
               Text(", ".join(f"{a}={n}" for a, n in sorted(f.relocatable_cubins.items(),
                                                             key=lambda x: arch_sort_key(x[0])))),
               Text(",".join(f.relocatable_ptx))] for f in reloc[:top]])
    if report.unreadable:
        show(out, "unreadable: the audit is incomplete", [Col("file", whole=True), Col("why")],
             [[Text(u.path), Text(u.reason)] for u in report.unreadable])
    if report.verdicts or report.problems:
        vrows = [[Text("files"), _status(p.status), Text(p.message)] for p in report.problems]
        for v in report.verdicts:
            vrows.append([Text(f"{v.target.name} ({v.target.cc})"), _status(v.status), Text(v.message)])
            for c in v.checks:
                if (c.status != "pass" or c.family == "nvfp4_gemm") and not v.message.startswith(c.message):
                    vrows.append([Text(""), _status(c.status), Text(f"{c.family}: {c.message}")])
        show(out, "verdicts", [Col("target", whole=True), Col("status"), Col("why")], vrows)
    sass = "SASS checked" if report.sass_checked else "SASS not checked"
    out.print(
        f"{len(report.files)} CUDA files of {report.stats.files_seen} scanned, "
        f"{report.stats.bytes_read / 2**20:.0f} MiB read, {report.stats.sass_cubins} cubins disassembled "
        f"({sass}), {report.elapsed_s:.1f} s"
    )


def _status(s: AuditStatus) -> Text:
    return Text(str(s), style=_STYLE[s])
