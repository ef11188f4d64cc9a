"""harness/ imports point one way: no circles, no arrow up a floor (tools/import_graph.py
FLOORS), and no function-level import of the project's own modules but those listed, each
for start-up time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import import_graph  # noqa: E402


def test_no_circles_and_nothing_imports_upward():
    s = import_graph.summary(ROOT)
    assert s["circles"] == []
    assert [f"{a.src}:{a.line} -> {a.dst}" for a in s["upward"]] == []
    assert s["modules"] > 50  # it read the package, not an empty folder


def test_function_level_imports_are_the_listed_ones():
    s = import_graph.summary(ROOT)
    assert [f"{a.src}:{a.line} -> {a.dst}" for a in s["late_unexplained"]] == []
    assert all(import_graph.allowed_late(a) for a in s["late"])


def test_the_checker_sees_a_circle_an_upward_arrow_and_a_hidden_import(tmp_path):
    pkg = tmp_path / "harness"
    (pkg / "run").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("from harness.run import session\n")  # up, and a circle
    (pkg / "run" / "__init__.py").write_text("")
    (pkg / "run" / "session.py").write_text("from harness import errors\n")
    (pkg / "run" / "executor.py").write_text("def f():\n    from harness.run import cell\n")
    (pkg / "run" / "cell.py").write_text("")
    s = import_graph.summary(tmp_path)
    assert s["circles"] == [["harness.errors", "harness.run.session"]]
    assert {(a.src, a.dst) for a in s["upward"]} == {("harness.errors", "harness.run.session"),
                                                     ("harness.run.executor", "harness.run.cell")}
    assert [(a.src, a.dst) for a in s["late_unexplained"]] == [("harness.run.executor", "harness.run.cell")]


def test_imports_for_the_type_checker_are_arrows_too(tmp_path):
    """`if TYPE_CHECKING:` imports never run, but a circle drawn with them is a circle: the one
    between bisect/cmakediff.py and bisect/store.py hid there."""
    pkg = tmp_path / "harness" / "bisect"
    pkg.mkdir(parents=True)
    (tmp_path / "harness" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "store.py").write_text("from harness.bisect.diff import Diff\n")
    (pkg / "diff.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                                 "    from harness.bisect.store import Store\n")
    s = import_graph.summary(tmp_path)
    assert s["circles"] == [["harness.bisect.diff", "harness.bisect.store"]]
    assert s["late"] == []  # module level, not a function-level import


def test_an_outside_viewer_draws_the_same_arrows_and_no_circle():
    """grimp (import-linter's graph, from PyPI) reads the package on its own: every arrow it finds
    is one of ours and the other way round, and it finds no circle either."""
    grimp = pytest.importorskip("grimp", reason="grimp is in the test extras: pip install -e '.[test]'")
    import harness

    assert Path(harness.__file__).resolve().parent == ROOT / "harness"  # the tree read below
    graph = grimp.build_graph("harness", cache_dir=None)
    theirs = {(a, b) for a in graph.modules for b in graph.find_modules_directly_imported_by(a)}
    ours = {(a.src, a.dst) for a in import_graph.arrows(ROOT)}
    assert theirs == ours
    assert import_graph.circles(theirs) == []


def test_a_package_init_importing_its_own_modules_is_a_circle(tmp_path):
    """Python runs a package's __init__ before any module of it: an __init__ that re-exports its
    modules sits on a circle with each of them (pydeps draws it so too)."""
    pkg = tmp_path / "harness" / "audit"
    pkg.mkdir(parents=True)
    (tmp_path / "harness" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from harness.audit.report import audit_path\n")
    (pkg / "report.py").write_text("def audit_path():\n    pass\n")
    assert import_graph.summary(tmp_path)["circles"] == [["harness.audit", "harness.audit.report"]]
    (pkg / "__init__.py").write_text('"""The audit."""\n')
    assert import_graph.summary(tmp_path)["circles"] == []
