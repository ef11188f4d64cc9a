"""`harness bisect`: which commit or release changed the verdict.

    harness bisect REPO --good A --bad B -- COMMAND       exit 0 good, 125 skip, 1..127 bad
    harness bisect REPO --good A --bad B --probe configure --arch-list 12.1a
    harness bisect pypi:vllm --good 0.10.0 --bad 0.33.0 --probe configure --arch-list 12.1a
    harness bisect --resume DIR [-- COMMAND]              finish an interrupted bisect (what it runs, named again)

Exit 0 when a first bad point was found, 1 when skips leave several suspects, 2 bad input.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import ConfigError
from harness.safety import grammar, numbers

if TYPE_CHECKING:
    from harness.bisect.history import GitHistory, HistorySpec, ReleaseHistory
    from harness.bisect.probes import BuildProbe, CellProbe, CommandProbe, ConfigureProbe, ProbeSpec
    from harness.bisect.store import BisectStore, Step

SOURCE_HELP = "a git repository (a local clone or mirror, or its URL), or pypi:PROJECT for its releases"


MAX_TIMEOUT_S = 7 * 86400


def register(sub) -> None:
    p = sub.add_parser("bisect", help="which upstream commit or release changed a verdict",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", nargs="?", help=SOURCE_HELP)
    p.add_argument("--good", help="a point where the verdict is good (the older end)")
    p.add_argument("--bad", help="a point where it is bad (the newer end)")
    p.add_argument("--probe", nargs="+", metavar="KIND",
                   help="configure | build | cell ID (default: the command after --); build and cell need -m and --stack")
    p.add_argument("--arch-list", help="TORCH_CUDA_ARCH_LIST for configure/build (default: the stack's)")
    p.add_argument("-m", "--matrix", help="matrix file: the stack's arch list and patches, and --probe cell's cell")
    p.add_argument("--stack", help="the stack of the matrix whose arch list and vLLM patches apply")
    p.add_argument("--patch", action="append", default=[], metavar="FILE", help="a patch applied to every point (repeatable)")
    p.add_argument("--out", help="the bisect's folder (default results/bisect-<time>)")
    p.add_argument("--resume", metavar="DIR", help="finish an interrupted bisect (nothing is judged twice); its command, "
                   "--python, -m and --patch are named again when they lie outside DIR")
    p.add_argument("--all-releases", action="store_true",
                   help="bisect every release at once (default: the newest patch of each minor first)")
    p.add_argument("--index", default=None, help="package index JSON API (default https://pypi.org/pypi/{name}/json)")
    p.add_argument("--python", help="a Python with a CUDA build of torch and cmake, for --probe configure")
    p.add_argument("--cutlass", help="a CUTLASS checkout for VLLM_CUTLASS_SRC_DIR (default: an empty folder)")
    p.add_argument("--timeout", type=numbers.arg("--timeout", float, lo=1, hi=MAX_TIMEOUT_S), default=3600, help="seconds one command probe may run (1 s to 7 days)")
    p.set_defaults(func=main, command=[])
    # `-- COMMAND`: argparse cannot give a positional after options and `--` to a subcommand, so
    # this parser takes what follows `--` itself, before its own parse.
    parse = p.parse_known_args

    def split(args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        cmd: list[str] = []
        if "--" in args:
            cut = args.index("--")
            args, cmd = args[:cut], args[cut + 1:]
        ns, extra = parse(args, namespace)
        ns.command = cmd
        return ns, extra

    p.parse_known_args = split


def _same_path(a: object, b: object) -> bool:
    try:
        return isinstance(a, str) and isinstance(b, str) and Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):
        return False


def _inside(folder: Path, value: object) -> bool:
    try:
        return isinstance(value, str) and Path(value).is_absolute() and \
            folder.resolve() in Path(value).resolve().parents
    except (OSError, RuntimeError, ValueError):
        return False


def untrusted(store: BisectStore, args) -> list[tuple[str, str, str]]:
    """What a resumed bisect folder says to run or read that the user has not named again on this
    command line and that does not lie inside the folder: (what, value, the flag that names it).
    A bisect folder is data (it may have been copied from elsewhere, or edited): it never picks
    a command, a Python, a matrix or a patch on its own."""
    probe = store.spec.probe
    out: list[tuple[str, str, str]] = []

    def need(what: str, value: object, given: object, flag: str) -> None:
        if value is None or value == "":
            return
        if not isinstance(value, str) or not (_same_path(value, given) or _inside(store.dir, value)):
            out.append((what, str(value), flag))

    kind = probe.probe
    if kind == "command":
        command = probe.command  # a list of words, or none: read as such from bisect.json (store.py)
        if not command:
            raise ConfigError(f"{store.dir}/bisect.json: probe.command is not a list of words",
                              hint="start a new bisect")
        if list(args.command) != command:
            out.append(("command", shlex.join(command), "-- " + shlex.join(command)))
    elif kind == "configure":
        need("python", probe.python, args.python, "--python")
        need("CUTLASS folder", probe.cutlass_dir, args.cutlass, "--cutlass")
    elif kind in ("build", "cell"):
        need("matrix", probe.matrix, args.matrix, "-m")
    # a list of [name, path], read as such from bisect.json (store.py)
    for _name, path in store.spec.setup.patches:
        if not any(_same_path(path, given) for given in args.patch) and not _inside(store.dir, path):
            out.append(("patch", path, "--patch"))
    return out


def _history(spec: HistorySpec) -> GitHistory | ReleaseHistory:
    from harness.bisect.history import PYPI_JSON, GitHistory, ReleaseHistory

    if spec.kind == "releases":
        if spec.project is None:
            raise _lacks("releases history", "project")
        return ReleaseHistory(spec.project, spec.good, spec.bad, index=spec.index or PYPI_JSON,
                              minor_first=spec.minor_first)
    if spec.repo is None:
        raise _lacks("git history", "repo")
    return GitHistory(spec.repo, spec.good, spec.bad)


def _lacks(what: str, key: str) -> ConfigError:
    return ConfigError(f"bisect.json: the {what} names no {key}", hint="start a new bisect")


def _arch_list(text: str):
    """--arch-list, read as a matrix's would be: it becomes TORCH_CUDA_ARCH_LIST of each configure."""
    from harness.archs import ArchList

    try:
        archs = ArchList.parse(text)
        problems = archs.problems()
    except ValueError as exc:
        problems = [str(exc)]
    if problems:
        raise ConfigError(f"--arch-list {text!r}: " + "; ".join(problems), hint="e.g. --arch-list 12.1a or '12.0a;12.1a'")
    return archs


def _probe(spec: ProbeSpec, history_spec: HistorySpec) -> CommandProbe | ConfigureProbe | BuildProbe | CellProbe:
    from harness.bisect import probes
    from harness.image import configure

    kind = spec.probe
    if kind == "command":
        if not spec.command:
            raise _lacks("command probe", "command")
        return probes.CommandProbe(tuple(spec.command), spec.timeout_s)
    if kind == "configure":
        if spec.torch_cuda_arch_list is None or spec.families is None:
            raise _lacks("configure probe", "torch_cuda_arch_list or families")
        tool = configure.find(spec.python, cutlass_dir=spec.cutlass_dir)
        if problems := tool.problems():
            raise ConfigError(f"--probe configure: missing {', '.join(problems)}",
                              hint="give --python a Python with a CUDA build of torch and cmake>=3.26, and put nvcc on PATH")
        return probes.ConfigureProbe(spec.torch_cuda_arch_list, tool, tuple(spec.families))
    if kind in ("build", "cell") and (spec.matrix is None or spec.stack is None):
        raise _lacks(f"{kind} probe", "matrix or stack")
    if kind == "build":
        return probes.BuildProbe(Path(str(spec.matrix)), str(spec.stack), history_spec)
    if kind == "cell":
        if spec.cell is None:
            raise _lacks("cell probe", "cell")
        return probes.CellProbe(Path(str(spec.matrix)), spec.cell, str(spec.stack), history_spec)
    raise ConfigError(f"unknown probe {kind!r}", hint="use configure, build, cell ID, or -- COMMAND")


def _new_spec(args) -> tuple[HistorySpec, ProbeSpec, list[tuple[str, Path]]]:
    from harness.bisect.history import HistorySpec
    from harness.bisect.probes import ProbeSpec
    from harness.image import configure

    if not (args.source and args.good and args.bad):
        raise ConfigError("harness bisect needs SOURCE, --good and --bad (or --resume DIR)",
                          hint="e.g. harness bisect pypi:vllm --good 0.10.0 --bad 0.33.0 --probe configure --arch-list 12.1a")
    if args.source.startswith("pypi:"):
        history = HistorySpec(kind="releases", project=args.source[5:], good=args.good, bad=args.bad,
                              index=args.index, minor_first=not args.all_releases)
    else:
        history = HistorySpec(kind="git", repo=args.source, good=args.good, bad=args.bad)
    stack = None
    patches = [(Path(p).name, Path(p)) for p in args.patch]
    if args.matrix:
        from harness.matrix.load import load_matrix

        matrix = load_matrix(args.matrix)
        if args.stack:
            if args.stack not in matrix.spec.stacks:
                raise ConfigError(f"--stack {args.stack}: not in {args.matrix}",
                                  hint=f"one of: {', '.join(matrix.spec.stacks)}")
            stack = matrix.spec.stacks[args.stack]
            if stack.vllm:
                patches = [(Path(p.path).name, matrix.patch_path(p)) for p in stack.vllm.patches] + patches
    for _name, path in patches:
        if not path.is_file():
            raise ConfigError(f"{path}: no such patch file", hint="check --patch or the stack's patches")
    arch = (str(_arch_list(args.arch_list)) if args.arch_list
            else str(stack.torch_cuda_arch_list) if stack is not None and stack.torch_cuda_arch_list is not None
            else None)
    kind = (args.probe or ["command"])[0]
    if kind == "command" and not args.command:
        raise ConfigError("no probe: give --probe configure|build|cell ID, or a command after --",
                          hint="e.g. harness bisect REPO --good A --bad B -- make test")
    if kind == "configure" and not arch:
        raise ConfigError("--probe configure needs --arch-list (or -m MATRIX --stack NAME)", hint="e.g. --arch-list 12.1a")
    if kind == "command":
        probe = ProbeSpec(probe=kind, command=list(args.command), timeout_s=args.timeout)
    elif kind == "configure":
        probe = ProbeSpec(probe=kind, torch_cuda_arch_list=arch, families=list(configure.DEFAULT_FAMILIES),
                          python=args.python, cutlass_dir=args.cutlass)
    elif kind == "build":
        if not args.matrix or not args.stack:
            raise ConfigError("--probe build needs -m MATRIX and --stack NAME (the stack is probe-built at each point)",
                              hint="e.g. --probe build -m matrix/spark.toml --stack spark-121a")
        probe = ProbeSpec(probe=kind, matrix=str(Path(args.matrix).resolve()), stack=args.stack,
                          torch_cuda_arch_list=arch)
    elif kind == "cell":
        if len(args.probe) != 2 or not args.matrix or not args.stack:
            raise ConfigError("--probe cell needs the cell's id, -m MATRIX and --stack NAME",
                              hint="e.g. --probe cell 'spark-sm121a/nvfp4-qwen/moe=marlin,lin=auto' -m matrix/spark.toml --stack spark-sm121a")
        probe = ProbeSpec(probe=kind, matrix=str(Path(args.matrix).resolve()), cell=args.probe[1], stack=args.stack)
    else:
        raise ConfigError(f"--probe {kind}: unknown", hint="use configure, build, cell ID, or -- COMMAND")
    return history, probe, patches


class LiveDisplay:
    """One line per judged point, and a spinner while a point is being judged."""

    COLOURS = {"good": "green", "bad": "red", "skip": "yellow"}

    def __init__(self, console) -> None:
        self.console = console
        self.status: Any = None

    def start(self, step, about, point) -> None:
        self.status = self.console.status(f"step {step} of at most {about}: {point.short} {point.title[:60]} ...")
        self.status.start()

    def done(self, step, about, point, record: Step) -> None:
        from harness.console import plain

        if self.status is not None:
            self.status.stop()
        colour = self.COLOURS[record.verdict]
        self.console.print(f"step {step:>2}/{about:<2} {plain(point.short):<12} [{colour}]{record.verdict:<4}[/{colour}]  "
                           f"{record.seconds:>6.0f} s  ", end="")
        self.console.print(f"{point.title[:50]}: {record.reason[:120]}", markup=False, highlight=False)


def main(args: argparse.Namespace) -> int:
    from harness.bisect import report
    from harness.bisect.session import Bisect, Setup
    from harness.bisect.store import BisectSpec, BisectStore, SetupSpec
    from harness.console import err, out, plain
    from harness.results.store import utc_now

    if args.resume:
        store = BisectStore.open(Path(args.resume))
        if refused := untrusted(store, args):
            shown = "; ".join(f"{what} {grammar.one_line(value)[:300]}" for what, value, _flag in refused)
            again = " ".join(f"{flag} {shlex.quote(value)}" for what, value, flag in refused if what != "command")
            tail = next((flag for what, _v, flag in refused if what == "command"), "")
            raise ConfigError(f"{store.dir}/bisect.json names what it would run or read, outside the folder and not "
                              f"named on this command line: {shown}",
                              hint="a bisect folder never picks what runs: if these are yours, name them again, "
                                   f"e.g. harness bisect --resume {shlex.quote(str(store.dir))} {again} {tail}".rstrip())
        setup = Setup(tuple((n, Path(p)) for n, p in store.spec.setup.patches))
        history = _history(store.spec.history)
        probe = _probe(store.spec.probe, store.spec.history)
    else:
        history_spec, probe_spec, patches = _new_spec(args)
        history = _history(history_spec)
        probe = _probe(probe_spec, history.spec())  # before the folder exists: bad input leaves nothing
        points = history.points()
        folder = Path(args.out or f"results/bisect-{utc_now().replace(':', '').replace('-', '')}")
        spec = BisectSpec(history=history.spec(), probe=probe_spec,
                          setup=SetupSpec(patches=[(n, str(p.resolve())) for n, p in patches]))
        store = BisectStore.create(folder, spec, points, history.preferred(points))
        setup = Setup(tuple(patches))
    err.print(f"bisect: {len(store.points)} points in {store.dir} (probe {store.spec.probe.probe})",
              markup=False, highlight=False)
    command = f"harness bisect --resume {shlex.quote(str(store.dir))}"
    bisect = Bisect(store, history, probe, setup, LiveDisplay(err))
    try:
        result = bisect.run()
    except KeyboardInterrupt:
        if 0 in bisect.steps and len(store.points) - 1 in bisect.steps:
            partial = bisect.result()
            store.write_result(partial, report.markdown(partial, command))
        err.print(f"[red]interrupted[/red]: {len(bisect.steps)} judged point(s) are kept in {plain(store.dir)}; "
                  f"finish with `{plain(command)}` (nothing judged is judged again)", highlight=False)
        return 130
    from harness.bisect.cmakediff import explain

    result = explain(store, history, result)
    md = report.markdown(result, command)
    store.write_result(result, md)
    out.print(md, markup=False, highlight=False)
    return 0 if result.first_bad else 1
