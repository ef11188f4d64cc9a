"""The trust boundary, held by construction: who in harness/ may touch files, processes, the
network and the terminal directly.

    python tools/boundary.py [ROOT]     # each direct use outside the choke points; exit 1 if any

Every file read or written, removed or renamed, folder walked, archive opened, subprocess
started, URL fetched, socket opened and console line printed by harness/ goes through
harness/safety/ (files, folders, archives), harness/proc.py (subprocesses), harness/http.py (the
network), harness/console.py (the terminal) and harness/git.py (git command lines). This reads
the AST of every other module and counts each direct use, by kind:

- file: `open`, `io.open`, `os.open`/`fdopen`, `Path.open` (with a mode, or none),
  `Path.read_*`/`write_*`, `shutil.copy*`/`move`, `gzip`/`lzma`/`bz2.open`;
- remove: `os.unlink`/`remove`/`rmdir`/`removedirs`, `shutil.rmtree`, `Path.unlink`/`rmdir`;
- rename: `os.rename`/`renames`/`replace`, `Path.rename`, `Path.replace(target)`; utime:
  `os.utime`;
- walk: `os.walk`/`scandir`/`listdir`/`fwalk`, `glob`, `Path.glob`/`rglob`/`iterdir`;
- tarfile, zipfile (and `.extractall`); subprocess: `subprocess`, `os.system`/`popen`,
  `os.exec*`/`spawn*`/`posix_spawn*`/`fork*`, `pty`; http: `urllib.request`/`error`,
  `http.client`/`server`; socket: `socket.socket`/`create_connection`/..., `asyncio`'s
  connections and servers;
- print: `print`, `builtins.print`, `sys.stdout`/`sys.stderr`; exec: `exec`, `eval`, `compile`;
- dynamic: an import or attribute the AST cannot name (`__import__(x)`,
  `importlib.import_module(x)`, `getattr(os, x)`, `from os import *`);
- git: a command line whose program is git (`["git", ...]`, `["/usr/bin/git", ...]`,
  `[which("git"), ...]` or a name bound to one) anywhere but harness/git.py.

Names are followed through the AST as Python binds them: `import os as o`, `from os import
system as s`, `run = subprocess.run`, `__import__("os").system`, `importlib.import_module(
"subprocess")`, `getattr(os, "system")`, `sys.modules["os"]`, `vars(os)["system"]`: each is the
use it names, called or passed as a value (`map(os.unlink, paths)`). `urllib.parse` and
`os.path` are string work and are no use.

EXCEPTIONS below is the one list of the uses that stay, keyed by (module, kind, function: the
enclosing `def`, `Class.method`, or `<module>`) with the number of uses and the reason: a
reason covers only the uses it names. A use past the count fails, and so does an entry that
counts more than are there (it is stale: lower or remove it), so the list never outlives its
reasons. tests/test_boundary.py and `make lint` hold the repository to this.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# The choke points themselves: the only modules that use what they wrap.
CHOKE_POINTS: dict[str, frozenset[str]] = {
    "harness.safety": frozenset({"file", "walk", "tarfile", "zipfile", "remove", "rename", "utime"}),
    "harness.proc": frozenset({"subprocess", "file"}),  # /proc/PID/stat, the start time of a process
    "harness.http": frozenset({"http", "file", "rename", "remove"}),  # a download beside its target, renamed
    "harness.console": frozenset({"print"}),
    "harness.git": frozenset({"git"}),  # git's fixed options and environment (no repository code runs)
}

# dotted name (or "module.*": every name in it) -> kind. The longest match wins.
WATCHED: dict[str, str] = {
    **dict.fromkeys(("builtins.open", "io.open", "io.FileIO", "os.open", "os.fdopen", "codecs.open", "gzip.open",
                     "lzma.open", "bz2.open", "gzip.GzipFile", "lzma.LZMAFile", "bz2.BZ2File", "shutil.copy",
                     "shutil.copy2", "shutil.copyfile", "shutil.copytree", "shutil.move", "shutil.copyfileobj",
                     "os.mkfifo", "os.mknod", "os.link", "os.symlink", "os.truncate"), "file"),
    **dict.fromkeys(("os.unlink", "os.remove", "os.rmdir", "os.removedirs", "shutil.rmtree"), "remove"),
    **dict.fromkeys(("os.rename", "os.renames", "os.replace"), "rename"),
    "os.utime": "utime",
    **dict.fromkeys(("os.walk", "os.scandir", "os.listdir", "os.fwalk", "glob.*"), "walk"),
    "tarfile.*": "tarfile",
    "zipfile.*": "zipfile",
    "shutil.unpack_archive": "zipfile",
    "shutil.make_archive": "zipfile",
    **dict.fromkeys(("subprocess.*", "os.system", "os.popen", "os.fork", "os.forkpty", "pty.*",
                     "multiprocessing.popen_fork.*"), "subprocess"),
    **dict.fromkeys(("os." + n for n in ("execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp",
                                         "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve",
                                         "spawnvp", "spawnvpe", "posix_spawn", "posix_spawnp")), "subprocess"),
    **dict.fromkeys(("urllib.request.*", "urllib.error.*", "http.client.*", "http.server.*", "socketserver.*",
                     "ftplib.*", "smtplib.*", "xmlrpc.client.*"), "http"),
    **dict.fromkeys(("socket.socket", "socket.create_connection", "socket.create_server", "socket.socketpair",
                     "socket.fromfd", "socket.SocketType", "asyncio.open_connection", "asyncio.start_server",
                     "asyncio.open_unix_connection", "asyncio.start_unix_server", "ssl.wrap_socket"), "socket"),
    **dict.fromkeys(("builtins.print", "sys.stdout", "sys.stderr", "sys.__stdout__", "sys.__stderr__"), "print"),
    **dict.fromkeys(("builtins.exec", "builtins.eval", "builtins.compile", "code.*", "runpy.*"), "exec"),
}
# modules whose import alone is a use (everything in them is one)
_WHOLE = {name[:-2] for name in WATCHED if name.endswith(".*")}
# modules an attribute of which may be a use: `getattr(os, x)` on one of these is dynamic
_RISKY = {name.split(".")[0] for name in WATCHED} | {"builtins", "importlib", "sys"}
_BUILTINS = {"open", "print", "exec", "eval", "compile", "__import__", "getattr", "vars"}
_IMPORTERS = {"builtins.__import__", "importlib.import_module", "importlib.__import__"}
# methods whose name alone says what they do, on a receiver the AST cannot name (a Path)
_METHODS = {"read_text": "file", "read_bytes": "file", "write_text": "file", "write_bytes": "file",
            "unlink": "remove", "rmdir": "remove", "rename": "rename", "iterdir": "walk", "glob": "walk",
            "rglob": "walk", "extractall": "zipfile", "symlink_to": "file", "hardlink_to": "file",
            "mkfifo": "file"}
_MODE = set("rwxab+t")

_HOST = "reads the host's own system files (/proc, /etc, /dev, a CUDA install), never a path from data"
_OWN = "the tool's own files, shipped with it (harness/data, importlib.resources)"
_MAINT = "a maintainer's tool (python -m), run from a checkout over the repository's own files"
# (module, kind, function) -> (uses, why that function may use that kind directly). Keep it short.
EXCEPTIONS: dict[tuple[str, str, str], tuple[int, str]] = {}  # filled in below, at the end of the file


@dataclass(frozen=True)
class Use:
    module: str
    kind: str
    line: int
    what: str
    function: str = "<module>"

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.what} ({self.kind}, in {self.function})"


def _kind_of(dotted: str) -> str | None:
    best = None
    for name, kind in WATCHED.items():
        if name.endswith(".*"):
            base = name[:-2]
            if dotted == base or dotted.startswith(base + "."):
                if best is None or len(base) > len(best[0]):
                    best = (base, kind)
        elif dotted == name or dotted.startswith(name + "."):
            if best is None or len(name) >= len(best[0]):
                best = (name, kind)
    return best[1] if best else None


def _mode_call(node: ast.Call) -> bool:
    """`x.open()`, `x.open("w")`, `x.open(mode="rb")`: a file open (RunStore.open(dir) is not)."""
    if not node.args and not node.keywords:
        return True
    args = [a for a in node.args[:1] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    kw = [k.value for k in node.keywords if k.arg == "mode"]
    if kw:
        return True
    mode = args[0].value if args else None  # type: ignore[attr-defined]
    return isinstance(mode, str) and bool(mode) and set(mode) <= _MODE


def _const(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


class _Reader(ast.NodeVisitor):
    def __init__(self, module: str, tree: ast.Module) -> None:
        self.module = module
        self.found: list[Use] = []
        self.stack: list[str] = []
        self.alias: dict[str, str] = {}  # local name -> dotted name it is bound to
        self.git_names: set[str] = set()
        self.safe: set[str] = set()  # names bound to harness.safety modules
        self.shadowed: set[str] = set()  # builtins the module defines itself
        self._bind(tree)

    # -- binding ---------------------------------------------------------------------------------

    def _bind(self, tree: ast.Module) -> None:
        """Every import, and every simple `name = <watched>` assignment, anywhere in the module
        (scopes are not told apart: a name bound anywhere to a use is one)."""
        for _ in range(3):  # assignments of assignments settle in a few rounds
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for a in node.names:
                        if a.asname:
                            self.alias[a.asname] = a.name
                        else:
                            self.alias.setdefault(a.name.split(".")[0], a.name.split(".")[0])
                        if a.name.startswith("harness.safety"):
                            self.safe.add((a.asname or a.name).split(".")[0])
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    for a in node.names:
                        if a.name != "*":
                            self.alias[a.asname or a.name] = f"{node.module}.{a.name}"
                        if node.module.startswith("harness.safety"):
                            self.safe.add(a.asname or a.name)
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    if node.name in _BUILTINS:
                        self.shadowed.add(node.name)
                elif isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    value = node.value
                    if value is None:
                        continue
                    for t in targets:
                        if not isinstance(t, ast.Name):
                            continue
                        if self._git_like(value):
                            self.git_names.add(t.id)
                        dotted = self.resolve(value)
                        if dotted is not None and (_kind_of(dotted) or dotted.split(".")[0] in _RISKY):
                            self.alias[t.id] = dotted
                        elif t.id in _BUILTINS:
                            self.shadowed.add(t.id)

    def resolve(self, node: ast.AST) -> str | None:
        """The dotted name an expression is bound to, when the AST says it."""
        if isinstance(node, ast.Name):
            if node.id in self.alias:
                return self.alias[node.id]
            if node.id in _BUILTINS and node.id not in self.shadowed:
                return f"builtins.{node.id}"
            return None
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            if base == "sys.modules":
                return None
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call):
            f = self.resolve(node.func)
            if f in _IMPORTERS and (name := _const(node.args[0] if node.args else None)):
                return name
            if f == "builtins.getattr" and len(node.args) >= 2 and (attr := _const(node.args[1])):
                base = self.resolve(node.args[0])
                return f"{base}.{attr}" if base else None
            if f == "builtins.vars" and node.args:
                return self.resolve(node.args[0])
            return None
        if isinstance(node, ast.Subscript):
            key = _const(node.slice)
            if key is None:
                return None
            base = node.value
            if isinstance(base, ast.Attribute) and base.attr == "__dict__":
                owner = self.resolve(base.value)
                return f"{owner}.{key}" if owner else None
            owner = self.resolve(base)
            if owner == "sys.modules":
                return key
            if isinstance(base, ast.Call) and self.resolve(base.func) == "builtins.vars" and base.args:
                inner = self.resolve(base.args[0])
                return f"{inner}.{key}" if inner else None
        return None

    def _git_like(self, node: ast.AST) -> bool:
        if (s := _const(node)) is not None:
            return s == "git" or s.endswith("/git")
        if isinstance(node, ast.Name):
            return node.id in self.git_names
        if isinstance(node, ast.Call) and node.args:
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            return name in ("which", "require_tool") and _const(node.args[0]) == "git"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("str", "Path"):
            return bool(node.args) and self._git_like(node.args[0])
        return False

    # -- counting --------------------------------------------------------------------------------

    def add(self, node: ast.AST, kind: str, what: str) -> None:
        self.found.append(Use(self.module, kind, getattr(node, "lineno", 0), what,
                              ".".join(self.stack) or "<module>"))

    def _scope(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        for d in getattr(node, "decorator_list", []):
            self.visit(d)
        self.stack.append(node.name)
        for child in node.body:
            self.visit(child)
        self.stack.pop()
        if not isinstance(node, ast.ClassDef):
            for default in [*node.args.defaults, *node.args.kw_defaults]:
                if default is not None:
                    self.visit(default)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scope

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            top = next((w for w in _WHOLE if a.name == w or a.name.startswith(w + ".")), None)
            if top:
                self.add(node, WATCHED[top + ".*"], f"import {a.name}")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if not node.module or node.level:
            return
        for a in node.names:
            if a.name == "*":
                if node.module.split(".")[0] in _RISKY:
                    self.add(node, "dynamic", f"from {node.module} import *")
                continue
            if kind := _kind_of(f"{node.module}.{a.name}"):
                self.add(node, kind, f"from {node.module} import {a.name}")

    def _reference(self, node: ast.AST) -> bool:
        """Count `node` when it names a use; True when it did (its parts are then not counted)."""
        dotted = self.resolve(node)
        if dotted is None:
            return False
        if kind := _kind_of(dotted):
            self.add(node, kind, dotted.removeprefix("builtins."))
            return True
        return False

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self._reference(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if self._reference(node):
            return
        if node.attr == "__dict__" and (owner := self.resolve(node.value)) and owner.split(".")[0] in _RISKY:
            self.add(node, "dynamic", f"{owner}.__dict__")
            return
        recv = node.value.id if isinstance(node.value, ast.Name) else None
        if node.attr in _METHODS and recv not in self.safe and (self.resolve(node.value) or "").split(".")[0] not in (
                "ast", "re", "fnmatch", "harness"):
            self.add(node, _METHODS[node.attr], f".{node.attr}")
        self.visit(node.value)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        dotted = self.resolve(node)
        if dotted is not None and (kind := _kind_of(dotted)):
            self.add(node, kind, dotted)
            return
        if self.resolve(node.value) == "sys.modules" and dotted is None:
            self.add(node, "dynamic", "sys.modules[...]")
        elif isinstance(node.value, ast.Call) and self.resolve(node.value.func) == "builtins.vars" and dotted is None:
            self.add(node, "dynamic", "vars(...)[...]")
        self.visit(node.value)
        if isinstance(node.slice, ast.Tuple):  # Literal["git", "releases"] is a type, not a command line
            for elt in node.slice.elts:
                self.visit(elt)
        else:
            self.visit(node.slice)

    def visit_List(self, node: ast.List | ast.Tuple) -> None:
        if node.elts and self._git_like(node.elts[0]) and self.module != "harness.git":
            self.add(node, "git", "['git', ...]")
        self.generic_visit(node)

    visit_Tuple = visit_List

    def visit_Call(self, node: ast.Call) -> None:
        f = self.resolve(node.func)
        named = self.resolve(node)  # __import__("os"), getattr(os, "system"), vars(os): what they return
        if named is not None and (kind := _kind_of(named)):
            self.add(node, kind, f"{(f or '').removeprefix('builtins.')}(...) -> {named}")
        elif f in _IMPORTERS and _const(node.args[0] if node.args else None) is None:
            self.add(node, "dynamic", f"{f.removeprefix('builtins.')}(<not a constant>)")
        elif f == "builtins.getattr" and len(node.args) >= 2 and _const(node.args[1]) is None:
            owner = self.resolve(node.args[0])
            if owner and owner.split(".")[0] in _RISKY:
                self.add(node, "dynamic", f"getattr({owner}, <not a constant>)")
        func = node.func
        if isinstance(func, ast.Attribute) and f is None:
            recv = func.value.id if isinstance(func.value, ast.Name) else None
            if recv not in self.safe:
                if func.attr == "open" and _mode_call(node):
                    self.add(node, "file", ".open()")
                elif func.attr == "replace" and len(node.args) == 1 and not node.keywords:
                    self.add(node, "rename", ".replace(target)")
        self.generic_visit(node)


def uses(tree: ast.AST, module: str) -> list[Use]:
    assert isinstance(tree, ast.Module)
    reader = _Reader(module, tree)
    reader.visit(tree)
    return reader.found


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


def check(root: Path, exceptions: dict[tuple[str, str, str], tuple[int, str]] | None = None
          ) -> tuple[list[Use], list[str]]:
    """(uses outside the choke points past what EXCEPTIONS counts, EXCEPTIONS entries that count
    more uses than there are)."""
    exceptions = EXCEPTIONS if exceptions is None else exceptions
    bad: list[Use] = []
    groups: dict[tuple[str, str, str], list[Use]] = {}
    for module, path in modules(root).items():
        for u in uses(ast.parse(path.read_text(encoding="utf-8"), str(path)), module):
            if u.kind not in _choke(module):
                groups.setdefault((u.module, u.kind, u.function), []).append(u)
    for key, found in sorted(groups.items()):
        listed = exceptions.get(key, (0, ""))[0]
        if len(found) > listed:
            bad += found if listed == 0 else [Use(f.module, f.kind, f.line, f"{f.what} [{len(found)} uses here, "
                                                  f"{listed} listed]", f.function) for f in found]
    stale = [f"({m!r}, {k!r}, {fn!r}) counts {n} use(s), {len(groups.get((m, k, fn), []))} found"
             for (m, k, fn), (n, _why) in sorted(exceptions.items()) if len(groups.get((m, k, fn), [])) < n]
    return bad, stale


def counts(root: Path) -> Counter:
    """Uses outside the choke points per (module, kind, function): what EXCEPTIONS must say."""
    c: Counter = Counter()
    for module, path in modules(root).items():
        for u in uses(ast.parse(path.read_text(encoding="utf-8"), str(path)), module):
            if u.kind not in _choke(module):
                c[(u.module, u.kind, u.function)] += 1
    return c


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent
    bad, stale = check(root)
    for u in bad:
        print(f"direct: {u}")
    for line in stale:
        print(f"stale exception: {line}: lower or remove it in tools/boundary.py")
    print(f"boundary: {len(bad)} direct use(s) outside the choke points, {len(EXCEPTIONS)} listed exception(s) "
          f"({sum(n for n, _ in EXCEPTIONS.values())} uses), {len(stale)} stale")
    return 1 if bad or stale else 0


_SCRATCH = ("removes the scratch folder the function made itself (tempfile.mkdtemp); shutil.rmtree works from "
            "file descriptors and follows no link inside it")
_CACHE = ("writes the tool's own cache entry: a download or unpacked tree beside its target, renamed into place; "
          "a partial or damaged entry removed (rmtree refuses a link at the top, follows none inside)")
_AUDIT = ("the audit's reason to be: it reads wheels a user names, member by member, bounded, with its own "
          "inflater (harness/audit/source.py); nothing is extracted to disk")
_TAR_OWN = "writes a tar of the tool's own bytes, in memory or into its own temporary folder; reads none from data"
EXCEPTIONS.update({
    ("harness.audit.scan", "walk", "plan"): (1, "os.walk with followlinks=False; each file is opened through "
                                                "harness.safety.paths (regular files only)"),
    ("harness.audit.scan", "zipfile", "<module>"): (1, _AUDIT),
    ("harness.audit.scan", "zipfile", "_plan_wheel"): (2, _AUDIT),
    ("harness.audit.source", "zipfile", "<module>"): (1, _AUDIT),
    ("harness.audit.source", "zipfile", "check_member"): (3, "compares a member's compression to zipfile's "
                                                              "constants (ZIP_STORED, ZIP_DEFLATED); opens nothing"),
    ("harness.audit.source", "zipfile", "member_chunks"): (1, _AUDIT),
    ("harness.bisect.cmakediff", "remove", "explain"): (1, _SCRATCH),
    ("harness.bisect.history", "remove", "_extract"): (2, _CACHE),
    ("harness.bisect.history", "rename", "_extract"): (1, _CACHE),
    ("harness.bisect.probes", "remove", "BuildProbe.observe"): (1, "removes the pinned matrix copy it wrote "
                                                                   "itself for this point (never a link: unlink)"),
    ("harness.bisect.probes", "remove", "CellProbe.observe"): (1, "removes the pinned matrix copy it wrote "
                                                                  "itself for this point (never a link: unlink)"),
    ("harness.bisect.session", "remove", "observe"): (1, _SCRATCH),
    ("harness.bench.wire", "socket", "_stamped_connect"): (1, "the benchmark client's own TCP connection to the "
                                                             "endpoint the run started or the user named (Target.parse: "
                                                             "http(s), a host, a port), opened by hand only to turn on "
                                                             "the kernel's receive timestamps (SO_TIMESTAMPNS)"),
    ("harness.bundle", "file", "pack"): (1, "lzma.LZMAFile over the descriptor harness.safety.writes.open_new "
                                            "opened (O_NOFOLLOW): compresses, opens no path"),
    ("harness.bundle", "tarfile", "<module>"): (1, _TAR_OWN),
    ("harness.bundle", "tarfile", "pack"): (1, "`bundle make` packs the wheelhouse pip wrote into the tool's own "
                                               "temporary folder (reading a bundle goes through harness.safety)"),
    ("harness.cli", "dynamic", "build_parser"): (1, "the lazy command registry: imports the modules named in "
                                                    "COMMANDS, the tool's own (start-up time)"),
    ("harness.cli", "print", "main"): (1, "`harness --version` answers before rich is imported (start-up time, "
                                          "tests/test_install.py); the text is the tool's own"),
    ("harness.cli.doctor", "walk", "attach_checks"): (3, _HOST),
    ("harness.cli.doctor", "walk", "available_matrices"): (1, "lists matrix/*.toml of the checkout the user "
                                                              "runs in, to name them in a hint; reads none"),
    ("harness.cli.doctor", "walk", "find_cuobjdump"): (1, _HOST),
    ("harness.engine", "tarfile", "<module>"): (1, "docker-py's put_archive/get_archive speak tar"),
    ("harness.engine", "tarfile", "RunningContainer.put_file"): (2, "builds a one-member tar in memory from the "
                                                                    "tool's own bytes for docker-py's put_archive"),
    ("harness.engine", "tarfile", "with_labels"): (3, "rewraps a build context the tool rendered itself, in "
                                                      "memory, adding a label line"),
    ("harness.engine", "walk", "Engine.info"): (1, _HOST),
    ("harness.fingerprint.corpus", "file", "load"): (1, _MAINT),
    ("harness.fingerprint.corpus", "file", "score"): (1, _MAINT),
    ("harness.fingerprint.corpus", "print", "main"): (4, _MAINT),
    ("harness.fingerprint.corpus", "walk", "load"): (1, _MAINT),
    ("harness.fingerprint.kernel_table", "file", "_function_mapping"): (1, _MAINT),
    ("harness.fingerprint.kernel_table", "file", "_linear_map"): (1, _MAINT),
    ("harness.fingerprint.kernel_table", "print", "main"): (5, _MAINT),
    ("harness.fingerprint.tables", "file", "_read"): (1, _OWN),
    ("harness.git", "remove", "_clone_bare"): (2, _CACHE),
    ("harness.git", "remove", "mirror"): (1, _CACHE),
    ("harness.git", "rename", "_clone_bare"): (1, _CACHE),
    ("harness.hostenv", "file", "_mem_total_gib"): (1, _HOST),
    ("harness.hostenv", "file", "_os_release"): (1, _HOST),
    ("harness.image.cache_store", "http", "<module>"): (2, "the compile cache's own store: an HTTP server on "
                                                           "127.0.0.1 that answers only its build's secret"),
    ("harness.image.cache_store", "socket", "_Server.__init__"): (1, "the store's open connections, cut when "
                                                                     "its build ends"),
    ("harness.image.configure", "remove", "configure"): (1, _SCRATCH),
    ("harness.image.configure", "walk", "_torch_nvrtc"): (1, "lists the libnvrtc of the Python the user named "
                                                             "(--python)"),
    ("harness.image.offline", "file", "tree_sha256"): (1, "digests the files of a tree the tool unpacked itself "
                                                          "with the data filter"),
    ("harness.image.offline", "rename", "fetch"): (1, _CACHE),
    ("harness.image.offline", "rename", "pack"): (1, _CACHE),
    ("harness.image.offline", "tarfile", "<module>"): (1, _TAR_OWN),
    ("harness.image.offline", "tarfile", "pack"): (1, "packs a tree the tool assembled itself in its own temporary "
                                                      "folder (reading archives goes through harness.safety)"),
    ("harness.image.offline", "walk", "pack"): (1, "packs a tree the tool assembled itself (links recorded as "
                                                   "links, never followed)"),
    ("harness.image.offline", "walk", "tree_sha256"): (1, "digests a tree the tool unpacked itself (links "
                                                          "recorded as links, never followed)"),
    ("harness.image.preflight", "remove", "apply_series"): (1, _SCRATCH),
    ("harness.image.preflight", "remove", "preflight_wheels"): (1, _SCRATCH),
    ("harness.image.probe", "file", "_as_probe"): (1, _OWN),
    ("harness.image.probe", "file", "collect"): (1, "copies one probe object, its path checked under the probe's "
                                                    "objects/ folder (harness.safety.paths.under), into its own "
                                                    "temporary folder"),
    ("harness.image.probe", "file", "load_units"): (1, _OWN),
    ("harness.image.render", "file", "_context_support_files"): (1, _OWN),
    ("harness.image.render", "file", "render_source"): (1, _OWN),
    ("harness.image.render", "tarfile", "context_tar"): (3, "the Docker build context, built in memory from "
                                                            "rendered files"),
    ("harness.image.sources", "remove", "_git_checkout"): (3, _CACHE),
    ("harness.image.sources", "remove", "sdist"): (1, _CACHE),
    ("harness.image.sources", "remove", "tree"): (4, _CACHE),
    ("harness.image.sources", "rename", "sdist"): (1, _CACHE),
    ("harness.image.sources", "rename", "tree"): (1, _CACHE),
    ("harness.image.wheels", "file", "render_wheels"): (1, _OWN),
    ("harness.probe_image", "print", "<module>"): (1, "runs inside a built image as a script (no harness there): "
                                                      "its one JSON line on stdout is its answer"),
    ("harness.results.memwatch", "file", "read_mem_available_gib"): (1, _HOST),
    ("harness.results.store", "remove", "check_writable"): (1, "removes the probe file tempfile.mkstemp made "
                                                               "itself to prove --results is writable"),
    ("harness.serve.gpu_attach", "socket", "port_free"): (1, "binds 127.0.0.1:PORT for an instant to learn "
                                                             "whether a server could; sends and accepts nothing"),
    ("harness.serve.signals", "file", "marker_of"): (1, "reads /proc/PID/environ of a process before signalling "
                                                        "it"),
    ("harness.stages.measure", "file", "probe_source"): (1, _OWN),
})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
