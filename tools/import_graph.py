"""The import graph of harness/: modules, arrows between them, circles, function-level imports.

    python tools/import_graph.py [ROOT]        # the numbers, then each circle and upward arrow

A room is a subpackage of harness (harness/run, harness/serve, ...) or a loose module
(harness/engine.py). Rooms sit on floors (FLOORS, bottom first); an arrow may point to the same
room or to a lower floor, never up. tests/test_import_graph.py holds the repository to that.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# Bottom first. An arrow goes from a room to a room on a lower floor; rooms on one floor do not
# import each other. `python -m harness` (a `__main__` module) is an entry
# point, on the top floor with the command line.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("harness", "errors", "archs", "labels", "record"),
    ("safety", "redact", "platforms"),
    ("console", "tables", "proc", "http", "probe_image"),
    ("gpus", "fingerprint", "bundle", "matrix", "bench", "git"),
    ("hostenv", "audit"),
    ("results",),
    ("owner",),
    ("engine",),
    ("lock", "serve", "report"),
    ("image",),
    ("stages", "bisect"),
    ("run",),
    ("cli",),
    ("__main__",),
)

# Inside a room whose modules are a pipeline of their own, the same rule by module, bottom first.
INNER: dict[str, tuple[str, ...]] = {
    "run": ("harness.run", "harness.run.options", "harness.run.schedule", "harness.run.outcome",
            "harness.run.cell", "harness.run.executor", "harness.run.session"),
}
# Modules of one inner floor that must not import each other (the executor is handed the cell).
APART: tuple[tuple[str, str], ...] = (("harness.run.executor", "harness.run.cell"),)

# Function-level imports of the project's own modules that stay, all for start-up time, keyed
# by (importing room or module, imported module or "*"). Anything else is an arrow hidden from
# the reader. `harness --help` imports every command module and `harness X` imports X's: a
# command module imports its work inside the command, so a command starts in a fraction of a
# second and `--version` imports nothing heavy (tests/test_install.py holds that).
_COMMAND = "start-up time: a command module imports its work when the command runs"
ALLOWED_LATE: dict[tuple[str, str], str] = {
    ("cli", "*"): _COMMAND,
    # `harness lock` and `harness build` import harness.lock at start: docker-py loads only
    # when a base image's digest is looked up
    ("harness.lock", "harness.engine"): "start-up time: docker-py loads when a digest is looked up",
}


def allowed_late(a: Arrow) -> bool:
    return any(k in ALLOWED_LATE for k in ((a.src, a.dst), (a.src, "*"), (room(a.src), "*")))


@dataclass(frozen=True)
class Arrow:
    src: str  # dotted module name
    dst: str
    line: int
    late: bool  # inside a function (run on first use, not at import)


def modules(root: Path) -> dict[str, Path]:
    pkg = root / "harness"
    out = {}
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = path
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def arrows(root: Path) -> list[Arrow]:
    known = modules(root)
    out: list[Arrow] = []
    for mod, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        for node, late in _imports(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif node.level == 0 and node.module:
                targets = [f"{node.module}.{a.name}" for a in node.names]
            for t in targets:
                dst = _resolve(t, known) if t.startswith("harness") else None
                if dst is not None and dst != mod:
                    out.append(Arrow(mod, dst, node.lineno, late))
    return out


def _imports(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import, with whether it sits in a function. Imports under `if TYPE_CHECKING:` count
    as module-level ones: they never run, but they are arrows all the same (a reader, the type
    checker and outside viewers follow them), and a circle drawn with them is a circle."""
    def walk(node: ast.AST, late: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, late
            else:
                inner = late or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                yield from walk(child, inner)
    return walk(tree, False)


def room(module: str) -> str:
    parts = module.split(".")
    if parts[-1] == "__main__":
        return "__main__"
    return parts[1] if len(parts) > 1 else parts[0]


def floor_of(name: str) -> int | None:
    return next((i for i, rooms in enumerate(FLOORS) if name in rooms), None)


def circles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    graph: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def upward(all_arrows: list[Arrow]) -> list[Arrow]:
    """Arrows to a room on the same or a higher floor (rooms missing from FLOORS count as up:
    the list must name them), and inside an INNER room, to a module not below."""
    bad = []
    for a in all_arrows:
        r1, r2 = room(a.src), room(a.dst)
        if r1 == r2:
            order = INNER.get(r1)
            if order is not None and (a.src not in order or a.dst not in order
                                      or order.index(a.dst) >= order.index(a.src)
                                      or (a.src, a.dst) in APART):
                bad.append(a)
            continue
        f1, f2 = floor_of(r1), floor_of(r2)
        if f1 is None or f2 is None or f2 >= f1:
            bad.append(a)
    return list({(a.src, a.dst, a.line): a for a in bad}.values())


def package_arrows(mods: dict[str, Path]) -> set[tuple[str, str]]:
    """A module to each package above it: Python runs a package's `__init__` before any module
    of it, so an `__init__` that imports a module of its own package closes a circle (outside
    viewers such as pydeps draw these arrows too)."""
    out = set()
    for m in mods:
        parts = m.split(".")
        out |= {(m, ".".join(parts[:i])) for i in range(1, len(parts)) if ".".join(parts[:i]) in mods}
    return out


def summary(root: Path) -> dict:
    mods = modules(root)
    all_arrows = arrows(root)
    edges = {(a.src, a.dst) for a in all_arrows}
    rooms = {room(m) for m in mods}
    late = list({(a.src, a.dst, a.line): a for a in all_arrows if a.late}.values())
    return {
        "modules": len(mods), "rooms": len(rooms),
        "arrows": len(edges),
        "room_arrows": len({(room(a), room(b)) for a, b in edges if room(a) != room(b)}),
        "circles": circles(edges | package_arrows(mods)),
        "upward": upward(all_arrows),
        "late": late,
        "late_unexplained": [a for a in late if not allowed_late(a)],
    }


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent
    s = summary(root)
    print(f"modules {s['modules']}  rooms {s['rooms']}  arrows {s['arrows']} (between rooms "
          f"{s['room_arrows']})  circles {len(s['circles'])}  upward {len(s['upward'])}  "
          f"function-level {len(s['late'])} (unexplained {len(s['late_unexplained'])})")
    for c in s["circles"]:
        print("circle:", " -> ".join(c))
    for a in s["upward"]:
        print(f"up: {a.src}:{a.line} -> {a.dst}")
    for a in s["late_unexplained"]:
        print(f"late: {a.src}:{a.line} -> {a.dst}")
    return 1 if s["circles"] or s["upward"] or s["late_unexplained"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
