"""The trust boundary, held by construction: who in harness/ may touch files, processes, URLs and
the terminal directly.

    python tools/boundary.py [ROOT]     # each direct use outside the choke points; exit 1 if any

Every file read or written, folder walked, subprocess started, URL fetched and console line
printed by harness/ goes through harness/safety/ (files and folders), harness/proc.py
(subprocesses), harness/http.py (URLs) and harness/console.py (the terminal). This reads the
AST of every other module and lists each direct use: `open`, `Path.read_*`/`write_*`/`open`,
`shutil.copy*`/`move`,
a folder walk (`os.walk`, `os.scandir`, `os.listdir`, `.glob`, `.rglob`, `.iterdir`),
`tarfile`, `subprocess`, `urllib.request`/`urllib.error`, `print`, and a git command line
started anywhere but harness/git.py. `urllib.parse` is pure string work and fetches nothing,
so it is not a use.

EXCEPTIONS below is the one list of the uses that stay, each with its reason. An entry that no
longer matches anything is an error too, so the list never outlives its reasons.
tests/test_boundary.py and `make lint` hold the repository to this.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

# The choke points themselves: the only modules that use what they wrap.
CHOKE_POINTS: dict[str, frozenset[str]] = {
    "harness.safety": frozenset({"file", "walk", "tarfile"}),
    "harness.proc": frozenset({"subprocess", "file"}),  # /proc/PID/stat, the start time of a process
    "harness.http": frozenset({"urllib", "file"}),  # a download written beside its target, then renamed
    "harness.console": frozenset({"print"}),
    "harness.git": frozenset({"git"}),  # git's fixed options and environment (no repository code runs)
}

_HOST = "reads the host's own system files (/proc, /etc, /dev, a CUDA install), never a path from data"
# (module, kind): why that module may use that kind directly. Keep it short.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("harness.probe_image", "print"): "runs inside a built image as a script (no harness there): its one "
                                      "JSON line on stdout is its answer",
    ("harness.cli", "print"): "`harness --version` answers before rich is imported (start-up time, "
                              "tests/test_install.py); the text is the tool's own",
    ("harness.hostenv", "file"): _HOST,
    ("harness.results.memwatch", "file"): _HOST,
    ("harness.serve.signals", "file"): "reads /proc/PID/environ of a process before signalling it",
    ("harness.cli.doctor", "walk"): _HOST,
    ("harness.engine", "walk"): _HOST,
    ("harness.image.configure", "walk"): "lists the libnvrtc of the Python the user named (--python)",
    ("harness.engine", "tarfile"): "docker-py's put_archive/get_archive speak tar: the archive is built "
                                   "in memory from the tool's own bytes, and read back one named member",
    ("harness.image.render", "tarfile"): "the Docker build context, built in memory from rendered files",
    ("harness.stages.measure", "file"): "package data (importlib.resources), shipped with the tool",
    ("harness.image.render", "file"): "the Dockerfile templates shipped with the tool (harness/data/docker)",
    ("harness.image.wheels", "file"): "the Dockerfile templates shipped with the tool (harness/data/docker)",
    ("harness.image.probe", "file"): "the probe-build helper shipped with the tool (harness/data/docker)",
    ("harness.fingerprint.kernel_table", "file"): "a maintainer's tool (python -m) over the tool's own "
                                                  "sources and tables",
    ("harness.fingerprint.kernel_table", "print"): "a maintainer's tool (python -m), run from a checkout",
    ("harness.fingerprint.corpus", "print"): "a maintainer's tool (python -m), run from a checkout",
    ("harness.fingerprint.corpus", "walk"): "a maintainer's tool over the repository's captured-log corpus",
    ("harness.fingerprint.corpus", "file"): "a maintainer's tool over the repository's captured-log corpus",
    ("harness.fingerprint.tables", "file"): "the fingerprint tables shipped with the tool",
    ("harness.audit.scan", "walk"): "os.walk never descends a link (followlinks=False), each link met is skipped "
                                    "and each file is opened through harness.safety.paths (regular files only)",
    ("harness.image.offline", "tarfile"): "packs a tree the tool assembled itself in its own temporary folder "
                                          "(reading archives goes through harness.safety.readers)",
    ("harness.image.offline", "walk"): "digests and packs a tree the tool assembled itself (links recorded as "
                                       "links, never followed)",
    ("harness.image.offline", "file"): "digests the files of a tree the tool unpacked itself with the data filter",
    ("harness.bundle", "tarfile"): "`bundle make` packs the wheelhouse pip wrote into the tool's own temporary "
                                   "folder (reading a bundle goes through harness.safety.readers)",
}


@dataclass(frozen=True)
class Use:
    module: str
    kind: str  # file, walk, tarfile, subprocess, urllib, print
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.what} ({self.kind})"


_FILE_METHODS = {"read_text", "read_bytes", "write_text", "write_bytes"}
_WALK_METHODS = {"glob", "rglob", "iterdir"}
_WALK_OS = {"walk", "scandir", "listdir", "fwalk"}
_MODE = set("rwxab+t")


def _mode_literal(node: ast.Call) -> bool:
    """`x.open("w")`, `x.open(mode="rb")`: a file open (RunStore.open(dir) and the like are not)."""
    args = [a for a in node.args[:1] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    kw = [k.value for k in node.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)]
    mode = args[0].value if args else (kw[0].value if kw else None)  # type: ignore[attr-defined]
    return isinstance(mode, str) and bool(mode) and set(mode) <= _MODE


def _safety_names(tree: ast.AST) -> set[str]:
    """Names bound to harness.safety modules here (`from harness.safety import writes`)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("harness.safety"):
            out |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("harness.safety")}
    return out


def uses(tree: ast.AST, module: str) -> list[Use]:
    safe = _safety_names(tree)
    found: list[Use] = []

    def add(node: ast.AST, kind: str, what: str) -> None:
        found.append(Use(module, kind, getattr(node, "lineno", 0), what))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                if top in ("subprocess", "tarfile"):
                    add(node, top, f"import {a.name}")
                elif a.name in ("urllib", "urllib.request", "urllib.error"):
                    add(node, "urllib", f"import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            top = node.module.split(".")[0]
            if top in ("subprocess", "tarfile"):
                add(node, top, f"from {node.module} import ...")
            elif node.module in ("urllib.request", "urllib.error") or (
                    node.module == "urllib" and any(a.name in ("request", "error") for a in node.names)):
                add(node, "urllib", f"from {node.module} import ...")
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id == "print":
                add(node, "print", "print()")
            elif isinstance(f, ast.Name) and f.id == "open":
                add(node, "file", "open()")
            elif isinstance(f, ast.Attribute):
                recv = f.value.id if isinstance(f.value, ast.Name) else None
                first = node.args[0] if node.args else None
                if (isinstance(first, ast.List) and first.elts and isinstance(first.elts[0], ast.Constant)
                        and first.elts[0].value == "git"):
                    add(node, "git", f"{recv}.{f.attr}(['git', ...])")
                if recv in safe:
                    continue
                if f.attr in _FILE_METHODS:
                    add(node, "file", f".{f.attr}()")
                elif recv in ("os", "io", "lzma", "gzip", "bz2") and f.attr in ("open", "fdopen"):
                    add(node, "file", f"{recv}.{f.attr}()")
                elif f.attr == "open" and recv != "tarfile" and _mode_literal(node):
                    add(node, "file", ".open(mode)")
                elif recv == "shutil" and f.attr in ("copy", "copy2", "copyfile", "copytree", "move", "copyfileobj"):
                    add(node, "file", f"shutil.{f.attr}()")
                elif recv == "os" and f.attr in _WALK_OS:
                    add(node, "walk", f"os.{f.attr}()")
                elif f.attr in _WALK_METHODS and recv not in ("ast", "glob"):
                    add(node, "walk", f".{f.attr}()")
    return found


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in sorted((root / "harness").rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = path
    return out


def _choke(module: str) -> frozenset[str]:
    return next((kinds for name, kinds in CHOKE_POINTS.items()
                 if module == name or module.startswith(name + ".")), frozenset())


def check(root: Path) -> tuple[list[Use], list[tuple[str, str]]]:
    """(uses outside the choke points and EXCEPTIONS, EXCEPTIONS entries that match nothing)."""
    bad: list[Use] = []
    matched: set[tuple[str, str]] = set()
    for module, path in modules(root).items():
        for u in uses(ast.parse(path.read_text(encoding="utf-8"), str(path)), module):
            if u.kind in _choke(module):
                continue
            if (module, u.kind) in EXCEPTIONS:
                matched.add((module, u.kind))
                continue
            bad.append(u)
    stale = sorted(set(EXCEPTIONS) - matched)
    return bad, stale


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent
    bad, stale = check(root)
    for u in bad:
        print(f"direct: {u}")
    for module, kind in stale:
        print(f"stale exception: ({module!r}, {kind!r}) matches nothing: remove it from tools/boundary.py")
    print(f"boundary: {len(bad)} direct use(s) outside the choke points, {len(EXCEPTIONS)} listed exception(s), "
          f"{len(stale)} stale")
    return 1 if bad or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
