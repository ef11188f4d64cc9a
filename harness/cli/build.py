"""`harness build`: build (or reuse) the image of every stack the selected cells need.

`--dry-run` touches no image: it renders each stack, shows its content-addressed tag, whether
the engine already has it, and the patch preflight against the real pinned sources.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.live import Live
from rich.table import Table
from rich.text import Text

from harness.cli.plan import add_matrix_args
from harness.console import err, out, plain, printable
from harness.errors import CellsFailed, ConfigError, HarnessError, PatchError
from harness.image import compile_cache
from harness.image.builder import BuildEvent, build_stacks, unpinned
from harness.image.dockerfile import render
from harness.image.preflight import preflight_stack
from harness.image.probe_cli import cache_line
from harness.image.stackbuild import resolve
from harness.matrix.load import load_matrix
from harness.matrix.plan import expand, group_by_stack
from harness.safety.writes import write_text


def register(sub) -> None:
    p = sub.add_parser("build", help="build the images the selected cells need (each stack once)")
    add_matrix_args(p)
    p.add_argument("--dry-run", action="store_true", help="show images, hashes, existence and patch preflight")
    p.add_argument("--force", action="store_true", help="rebuild even when the image exists")
    p.add_argument("--allow-unpinned", action="store_true", help="accept a base image without a digest")
    p.add_argument("--log-dir", default="runs/build-logs", help="where build-<stack>.log files go")
    p.add_argument("--no-preflight", action="store_true", help="skip the patch preflight before building")
    p.add_argument("--probe", action="store_true",
                   help="configure and compile only the kernels the arch verdict depends on, then audit them "
                   "(minutes); no image to serve")
    p.add_argument("--probe-first", action="store_true",
                   help="probe each stack, then fully build only the stacks whose probe passed")
    p.add_argument("--probe-parts", default="packaging,units", metavar="packaging,units",
                   help="what --probe runs: the packaging probe (the install step on stand-in extensions), "
                   "the units probe (configure, compile the verdict's kernels, audit), or both")
    p.add_argument("--platform", default=None, metavar="linux/amd64|linux/arm64",
                   help="the CPU the images are for (default: the engine's own; another one runs under "
                   "the host's binfmt emulation, e.g. qemu-user-static)")
    p.set_defaults(func=run)


def _stacks(matrix, k) -> list[str]:
    stacks = list(group_by_stack(expand(matrix, k)))
    # a prebuilt `image` stack has nothing to build: `harness run` records what it is
    return [s for s in stacks if matrix.spec.stacks[s].runner == "docker" and matrix.spec.stacks[s].image is None]


def _engine_or_none():
    from harness.engine import connect

    try:
        return connect(timeout=10)
    except HarnessError as exc:
        err.print(f"[yellow]no engine[/yellow]: {plain(exc.message)}", markup=True)
        return None


def _requirement_lines(r) -> list[str]:
    """Each build requirement with the files it came from (merged per package), torch with its check."""
    from harness.image.requirements import merged

    if r.requirements is None:
        return ["(not read)"]
    lines = [f"{t.requirement}  <- {t.origin}: the stack's torch satisfies it" for t in r.requirements.torch]
    lines += [f"{name}{spec}  <- {', '.join(origins)}" for name, spec, origins in merged(r.requirements.items)]
    return lines or ["(none listed)"]


def dry_run(matrix, stacks: list[str], platform_arg: str | None) -> int:
    engine = _engine_or_none()
    from harness import platforms
    from harness.image.prefetch import source_lines, stack_needs
    from harness.tables import Col, show

    platform = platforms.parse(platform_arg) if platform_arg else None
    builds = resolve(matrix, stacks, platform=platform, engine=engine, base_required=False)
    rows = []
    bad = 0
    for build in builds:
        name, base_id = build.name, build.base_image_id
        base = build.stack.base_image
        assert base is not None, "a stack with an image to build has a base image (Stack's validator)"
        r = render(build)
        exists = "?" if engine is None else ("yes" if engine.image_labels(r.image_ref) is not None else "no")
        if base.local:
            pinned = f"local, id {base_id[:19]}" if base_id else "local: NOT FOUND on the engine (tag shown is provisional)"
        else:
            pinned = "yes" if base.digest else "NO (`harness lock`, or --allow-unpinned)"
        lines = []
        for series in preflight_stack(build):
            if not series.patches:
                lines.append(f"{series.project} ({series.source}): no patches")
            for p in series.patches:
                lines.append(f"{series.project} ({series.source}): {p.describe()}")
            bad += not series.ok
        needs = stack_needs(build.matrix, name)
        fetched = source_lines(needs) if needs is not None else ["-"]
        rows.append([Text(name), Text(r.image_ref), Text(r.content_hash[:16]), Text(exists), Text(pinned),
                     Text("\n".join(lines)), Text("\n".join(fetched)), Text("\n".join(_requirement_lines(r)))])
    shown = builds[0].platform.docker if builds else "-"
    show(out, f"{matrix.spec.matrix.name}: {len(stacks)} image(s) for {shown}",
         [Col("stack", whole=True), Col("image", whole=True), Col("content hash", whole=True), Col("exists"),
          Col("base pinned"), Col("patch preflight"), Col("what vLLM's CMake fetches"),
          Col("build requirements <- the file that lists them")], rows)
    if bad:
        raise PatchError(f"{bad} patch series do not apply to their pinned sources",
                         hint="refresh the stale patch (`harness patches add-pr`, or rebase it) and run again")
    return 0


def _check_patches(builds) -> None:
    problems = [p for b in builds for series in preflight_stack(b) for p in series.problems()]
    if problems:
        raise PatchError("patch preflight failed:\n  - " + "\n  - ".join(problems),
                         hint="fix or refresh the named patch; `harness build --dry-run` shows every series")


def _probe_parts(value: str) -> tuple[str, ...]:
    from harness.image.probe import PARTS

    parts = tuple(p.strip() for p in value.split(",") if p.strip())
    if not parts or any(p not in PARTS for p in parts):
        raise ConfigError(f"--probe-parts: {value[:80]!r} is not a list of {', '.join(PARTS)}",
                          hint="e.g. --probe-parts packaging")
    return parts


def _probe_failed(stacks: list[str], passed: list[str]) -> int:
    bad = [s for s in stacks if s not in passed]
    raise CellsFailed(f"probe failed for {', '.join(bad)}: not fully built",
                      hint="read the probe table above and build-<stack>-probe.log")


def run(args: argparse.Namespace) -> int:
    matrix = load_matrix(args.matrix)
    stacks = _stacks(matrix, args.k)
    if not stacks:
        raise ConfigError("no docker stack to build in the selected cells (local and prebuilt-image stacks "
                          "have none)", hint="check -k and `harness plan`")
    from harness import platforms
    from harness.lock import ensure_lock

    asked = platforms.parse(args.platform) if args.platform else None  # the lock is checked for it
    ensure_lock(matrix, stacks, lock_if_missing=not (args.dry_run or args.allow_unpinned), platform=asked,
                say=lambda s: err.print(s, markup=False))
    if args.dry_run:
        return dry_run(matrix, stacks, args.platform)
    from harness.engine import connect

    engine = connect()
    builds = resolve(matrix, stacks, platform=asked, engine=engine)  # the lock applied, once
    if not args.allow_unpinned and (problems := unpinned(builds)):
        raise ConfigError("unpinned base image(s):\n  - " + "\n  - ".join(problems),
                          hint=f"`harness lock -m {args.matrix}`, or pass --allow-unpinned")
    if not args.no_preflight:
        _check_patches(builds)
    if args.probe or args.probe_first:
        from harness.image.probe_cli import run_probes

        passed = run_probes(builds, engine=engine, log_dir=Path(args.log_dir), force=args.force,
                            parts=_probe_parts(args.probe_parts))
        if args.probe:
            return 0 if len(passed) == len(stacks) else _probe_failed(stacks, passed)
        if not passed:
            return _probe_failed(stacks, passed)
        builds = [b for b in builds if b.name in passed]
    state: dict[str, tuple[str, float]] = {}

    def view() -> Table:
        t = Table(show_header=True)
        for col in ("stack", "step", "elapsed"):
            t.add_column(col, overflow="fold")
        for s, (step, el) in state.items():
            t.add_row(Text(printable(s)), Text(printable(step)), f"{el:.0f} s")  # data, never markup
        return t

    with Live(view(), console=err, refresh_per_second=4, transient=False) as live:
        started = time.monotonic()

        def on_event(e: BuildEvent) -> None:
            if e.kind == "line":
                return
            state[e.stack] = (e.text, time.monotonic() - started)
            live.update(view())

        outcomes = build_stacks(builds, engine=engine, log_dir=Path(args.log_dir), force=args.force,
                                allow_unpinned=args.allow_unpinned, on_event=on_event)
    failed = 0
    for o in outcomes.values():
        out.print(f"{o.stack}: {o.status} {o.image_ref} ({o.duration_s:.0f} s)"
                  + (f" log {o.log_path}" if o.log_path else ""), markup=False)
        if o.compile_cache is not None:  # a build with compile steps (not a wheel stack's)
            out.print(f"  {cache_line(o.compile_cache)}", markup=False)
            if line := compile_cache.compiled_line(o.compile_cache):
                out.print(f"  {line}", markup=False)
        if o.status in ("built", "failed"):
            # the record `harness run` keeps as builds/<stack>.json, beside the log
            write_text(Path(args.log_dir) / f"build-{o.stack}.json", o.model_dump_json(indent=1),
                       flag="--log-dir file")  # whole, never through a link
        if o.rust_frontend:
            out.print(f"  vLLM's Rust front end: {o.rust_frontend}", markup=False)
        for p in o.arch_problems:
            out.print(f"  arch: {p}", markup=False)
        if o.status == "failed":
            failed += 1
            for line in o.log_tail[-15:]:
                out.print(f"  | {line}", markup=False)
    if failed:
        raise CellsFailed(f"{failed} of {len(outcomes)} image build(s) failed", hint="read the build logs above")
    return 0
