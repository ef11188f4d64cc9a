"""`harness run`, `harness rejudge`, `harness reap`: the pipeline with live progress."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

from harness.cli.plan import add_matrix_args
from harness.console import err, out
from harness.errors import CellsFailed, ConfigError, MatrixError
from harness.results.model import Status
from harness.safety import numbers
from harness.safety.grammar import one_line

STATUS_STYLE: dict[Status, str] = {
    Status.PASS: "green", Status.FAIL: "red", Status.BUILD_FAILED: "red", Status.CRASHED: "red",
    Status.HUNG: "red", Status.TIMEOUT: "red", Status.ERROR: "magenta", Status.SKIPPED: "yellow"}


def register(sub) -> None:
    p = sub.add_parser("run", help="build, serve, fingerprint and benchmark every selected cell")
    add_matrix_args(p)
    p.add_argument("--results", default="results", help="results root (default ./results)")
    p.add_argument("--resume", metavar="RUN_DIR", help="finish an interrupted run (skips finished cells)")
    p.add_argument("--keep-failed", action="store_true", help="keep the container of a failed cell")
    p.add_argument("--soak", type=numbers.arg("--soak", float, lo=0, hi=7 * 86400), default=0.0, metavar="SECONDS",
                   help="after the benchmark, keep a steady load this long while watching memory")
    p.add_argument("--no-bench", action="store_true", help="serve and fingerprint only")
    p.add_argument("--force-build", action="store_true", help="rebuild images even if they exist")
    p.add_argument("--allow-unpinned", action="store_true", help="build from a base image with no digest")
    p.add_argument("--cross-check", metavar="CMD",
                   help="shell command run against each ready server after the benchmark "
                        "(env: HARNESS_URL, HARNESS_MODEL, HARNESS_OUT)")
    p.add_argument("--no-report", action="store_true", help="do not write report.md/html at the end")
    p.set_defaults(func=run)

    r = sub.add_parser("rejudge", help="judge a stored run again from its logs, with today's rules")
    r.add_argument("run_dir", help="a results/<run-id> directory")
    r.set_defaults(func=rejudge)

    k = sub.add_parser("reap", help="remove containers of dead runs; mark their run directories interrupted")
    k.add_argument("--results", default="results", help="results root to look in (default ./results)")
    k.add_argument("--run", metavar="RUN_ID", help="remove every container of this run, dead or alive")
    k.set_defaults(func=reap)


# --- live progress ----------------------------------------------------------------------------


def _wrap(text: str, indent: int, width: int) -> list[str]:
    """Lines of at most `width`, broken between words only (ids and paths are never cut)."""
    return textwrap.wrap(text, width=max(20, width - indent), break_long_words=False,
                         break_on_hyphens=False) or [""]


def cell_lines(c, width: int) -> list[str]:
    """A finished cell as plain lines: status and id, then what ran and why it failed."""
    solo = c.decode_c1
    fp = c.fingerprint
    facts = []
    if fp is not None:
        facts += [f"moe {fp.moe_backend or '-'}",
                  f"linear {', '.join(fp.linear_kernels) or '-'}",
                  f"attention {fp.attention_backend or '-'}"]
    if solo:
        facts.append(f"decode@1 {solo:.1f} tok/s")
    lines = [f"{c.status.value:>12}  {c.id}"]
    pad = " " * 14
    if facts:
        lines += [pad + x for x in _wrap(" · ".join(facts), 14, width)]
    for reason in c.reasons[:4]:
        lines += [pad + x for x in _wrap("- " + reason, 14, width)]
    return lines


class LiveProgress:
    """What `harness run` shows on a terminal: the build step and its last line, the start-up
    clock and the server's last log line, the benchmark phase; a block per finished cell."""

    def __init__(self, total: int) -> None:
        from rich.live import Live
        from rich.text import Text

        self._Text = Text
        self.total = total
        self.current: str = ""
        self.phase: str = ""
        self.log = None
        self.since = time.monotonic()
        self.build_line = ""
        self.live = Live(self._render(), console=err, refresh_per_second=4, transient=True,
                         get_renderable=self._render)

    def _render(self):
        width = err.size.width
        if self.build_line:
            head = self.build_line
        elif self.current:
            head = f"{self.current}: {self.phase} {time.monotonic() - self.since:.0f} s"
        else:
            head = "starting"
        from harness.redact import redact_text  # a rich Text passes the console's mask

        text = self._Text(_fit(redact_text(head), width), style="bold")
        last: list[str] = self.log.tail(1) if self.log is not None else []
        if last:
            text.append("\n" + _fit("  " + redact_text(last[-1].strip()), width), style="dim")
        return text

    def __enter__(self):
        self.live.__enter__()
        return self

    def __exit__(self, *exc):
        self.live.__exit__(*exc)

    def build_event(self, event) -> None:
        if event.kind == "done":
            self.build_line = ""
            self.live.console.print(f"build {event.stack}: {event.text} ({event.elapsed_s:.0f} s)",
                                    markup=False)
        elif event.kind == "step":
            self.build_step = event.text
            self.build_line = f"build {event.stack}: {event.text} ({event.elapsed_s:.0f} s)"
        elif event.kind == "line":
            step = getattr(self, "build_step", "")
            self.build_line = f"build {event.stack}: {step} | {event.text.strip()}"
        else:
            self.build_line = f"build {event.stack}: starting {event.text}"

    def cell_started(self, cell, index: int, total: int) -> None:
        self.current = f"[{index}/{total}] {cell.id}"
        self.phase = "starting"
        self.log = None
        self.since = time.monotonic()

    def cell_phase(self, cell, phase: str, log=None) -> None:
        if phase.split()[:1] != self.phase.split()[:1]:  # a new phase: its clock starts
            self.since = time.monotonic()
        self.phase = phase
        if log is not None:
            self.log = log

    def cell_finished(self, result, index: int, total: int) -> None:
        self.current, self.log = "", None
        _print_cell(self.live.console, result, f"[{index}/{total}]")

    def cell_updated(self, result, before) -> None:
        self.live.console.print(f"  {result.id}: {before.value} -> {result.status.value} "
                                "(NVFP4-vs-FP8 rule, now that both cells ran)", markup=False)


class PlainProgress(LiveProgress):
    """The same blocks, no live line: for logs and pipes."""

    def __init__(self, total: int) -> None:  # noqa: D107 - no Live here
        self.total = total

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def build_event(self, event) -> None:
        if event.kind in ("step", "done"):
            err.print(f"build {event.stack}: {event.text} ({event.elapsed_s:.0f} s)", markup=False)

    def cell_started(self, cell, index: int, total: int) -> None:
        err.print(f"[{index}/{total}] {cell.id}: starting", markup=False)

    def cell_phase(self, cell, phase: str, log=None) -> None:
        head = phase.split(":")[0]  # one line per phase and per benchmark level, not per request
        if head != getattr(self, "_last", None):
            self._last = head
            err.print(f"  {head}", markup=False)

    def cell_finished(self, result, index: int, total: int) -> None:
        _print_cell(err, result, f"[{index}/{total}]")

    def cell_updated(self, result, before) -> None:
        err.print(f"  {result.id}: {before.value} -> {result.status.value} (NVFP4-vs-FP8 rule)",
                  markup=False)


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width - 1 else text[: max(0, width - 2)] + "…"


def _print_cell(console, result, prefix: str) -> None:
    style = STATUS_STYLE[result.status]
    lines = cell_lines(result, console.size.width)
    console.print(f"{prefix} ", end="", markup=False)
    console.print(lines[0], style=style, markup=False, highlight=False)
    for line in lines[1:]:
        console.print(line, markup=False, highlight=False)


# --- commands ---------------------------------------------------------------------------------


def resumed_matrix(run_dir: Path, recorded: str | None, given: str | None, *, default: str | None = None) -> str | None:
    """The matrix a resumed run loads. run.json is data: the matrix it names (which the run then
    builds and serves) is loaded only when it lies inside the run folder or the user names the
    same file again with -m; otherwise it is shown and refused."""
    if not recorded:
        return given

    def resolved(p: str) -> Path | None:
        try:
            return Path(p).expanduser().resolve()
        except (OSError, RuntimeError, ValueError):
            return None

    where, folder = resolved(recorded), resolved(str(run_dir))
    if given == default and (given is None or resolved(given) != where):
        given = None  # -m left at its default: not a choice the user made
    if given is not None:
        if where is None or resolved(given) != where:
            raise ConfigError(f"{run_dir}/run.json: the run was made from matrix {one_line(recorded)[:300]}, "
                              f"not -m {given}", hint="resume with the matrix the run was made from, or start a new run")
        return given
    if where is None or folder is None or folder not in where.parents:
        raise ConfigError(f"{run_dir}/run.json names matrix {one_line(recorded)[:300]}, outside the run folder: "
                          "a run folder never picks what is built and served on its own",
                          hint=f"if it is yours, name it again: harness run --resume {run_dir} -m {recorded}")
    return recorded


def run(args) -> int:
    from harness.matrix.load import load_matrix
    from harness.matrix.plan import expand
    from harness.results.store import RunStore
    from harness.run.options import RunOptions
    from harness.run.session import exit_code, run_matrix

    resume = Path(args.resume) if args.resume else None
    k = args.k
    matrix_path = args.matrix
    if resume is not None:
        stored = RunStore.open(resume)  # a missing or broken run.json is exit 2, named
        from harness.cli.plan import DEFAULT_MATRIX

        matrix_path = resumed_matrix(resume, stored.run.matrix.path, args.matrix, default=DEFAULT_MATRIX)
        if k is None:  # an explicit -k widens the run; without one, finish what it planned
            k = stored.run.k
        if not matrix_path:
            raise ConfigError(f"{resume}/run.json records no matrix path",
                              hint="pass -m MATRIX with --resume")
        err.print(f"resuming {resume}: {len(stored.finished_ids())} of {len(stored.run.cells)} "
                  "cells already finished", markup=False)
    matrix = load_matrix(matrix_path)
    from harness.lock import ensure_lock
    from harness.run.schedule import arch_refusals

    if problems := arch_refusals(expand(matrix, k), matrix):  # before a lock is resolved or written
        raise MatrixError(str(matrix.path), problems)
    from harness.matrix.plan import group_by_stack

    # Pins first: a stale lock is refused before anything starts; no lock yet is written now.
    # The build stage applies it, once, where it resolves each stack's build.
    ensure_lock(matrix, list(group_by_stack(expand(matrix, k))), lock_if_missing=not args.allow_unpinned,
                say=lambda s: err.print(s, markup=False))
    total = len(expand(matrix, k))
    progress_cls = LiveProgress if err.is_terminal else PlainProgress
    err.print(f"harness run {matrix.path.name}: {total} cells", markup=False)
    with progress_cls(total) as progress:
        opts = RunOptions(results_root=Path(args.results), keep_failed=args.keep_failed,
                          soak_s=args.soak, bench=not args.no_bench, force_build=args.force_build,
                          allow_unpinned=args.allow_unpinned, cross_check=args.cross_check,
                          argv=tuple(sys.argv), progress=progress)
        store = run_matrix(matrix, k=k, opts=opts, resume_dir=resume)
    cells = store.cells()
    out.print(f"run {store.run_id}: " + ", ".join(
        f"{sum(1 for c in cells if c.status == s)} {s.value}"
        for s in dict.fromkeys(c.status for c in cells)), markup=False)
    if not args.no_report:
        from harness.report.write import write_report

        paths = write_report(store.dir)
        err.print(f"report: {', '.join(str(p) for p in paths)}", markup=False)
    out.print(f"results: {store.dir}", markup=False)
    if exit_code(store):
        bad = [c for c in cells if not c.status.ok or c.reasons]
        if bad and all(c.verdict("build.base") for c in bad):
            hint = ("make the base image reachable from this engine (a registry login, the network, "
                    "or `docker load` of a saved image), then `harness run --resume " f"{store.dir}`")
        else:
            hint = f"read {store.dir}/report.md, or `harness bug {store.dir} <cell>`"
        raise CellsFailed(f"{len(bad)} of {len(cells)} cells did not pass", hint=hint)
    return 0


def rejudge(args) -> int:
    """Every verdict of a stored run derived again from its stored logs and figures, with the
    fingerprint and rules of this version; the cross-cell rule applied last."""
    from harness.matrix.model import Bench, Expect
    from harness.results.store import RunStore
    from harness.run.outcome import apply_format_rule
    from harness.stages.judge import rejudge as rejudge_cell

    store = RunStore.open(Path(args.run_dir))
    try:
        expect = Expect.model_validate(store.run.matrix.expect.model_dump(exclude_unset=True))
        bench = Bench.model_validate(store.run.matrix.bench.model_dump(exclude_unset=True))
    except ValueError as exc:
        raise ConfigError(f"{store.dir}/run.json: matrix.expect or matrix.bench is not valid ({exc})",
                          hint="re-run the matrix") from None
    if not store.run.matrix.ratio_recorded:  # a run from before the rule: it is not judged by it now
        expect = expect.model_copy(update={"nvfp4_over_fp8_min_ratio": None})
    before = {c.id: c for c in store.cells()}
    for cell in before.values():
        text = store.read_log(cell.serve.log) if cell.serve and cell.serve.log else None
        after = rejudge_cell(cell, expect, text)
        if after != cell:
            store.write_cell(after)
    apply_format_rule(store, expect, bench)
    changed = 0
    for c in store.cells():
        old = before[c.id]
        _print_cell(out, c, "")
        was = {(v.check, v.status): v.message for v in old.verdicts}
        now = {(v.check, v.status): v.message for v in c.verdicts}
        if c.status != old.status:
            out.print(f"              status {old.status.value} -> {c.status.value}", markup=False)
        for check, status in sorted(now.keys() - was.keys()):
            out.print(f"              + {check} ({status.value})", markup=False)
        for check, status in sorted(was.keys() - now.keys()):
            out.print(f"              - {check} ({status.value})", markup=False)
        reworded = sorted(k for k in now.keys() & was.keys() if now[k] != was[k])
        for check, status in reworded:
            out.print(f"              ~ {check} ({status.value}): reworded", markup=False)
        changed += now != was or c.status != old.status
    out.print(f"{changed} cell(s) changed verdicts", markup=False)
    return 0


def reap(args) -> int:
    from harness.engine import connect
    from harness.errors import EnvironmentProblem
    from harness.run.executor import LazyEngine
    from harness.run.session import Reaped, reap_dead

    if args.run:
        done = Reaped(containers=connect().reap(run_id=args.run))
    else:
        try:
            done = reap_dead(Path(args.results), engine_if_needed=LazyEngine())
        except EnvironmentProblem:
            done = reap_dead(Path(args.results))
    for name in done.containers:
        out.print(f"removed container {name}", markup=False)
    for server in done.servers:
        out.print(f"stopped local server {server}", markup=False)
    for run_dir in done.runs:
        out.print(f"marked interrupted: {run_dir} (finish it with `harness run --resume {run_dir}`)",
                  markup=False)
    if not done:
        out.print("nothing to reap", markup=False)
    return 0
