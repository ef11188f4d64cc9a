"""The docs that describe the code are held to it: a change to one without the other fails here.

docs/layout.md's floors against tools/import_graph.py FLOORS; docs/results-format.md's records
against the record classes and the format number; README's exit-code table against
harness.errors.EXIT_CODES (which `harness --help` prints), and every error class's code."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path

import pytest

import harness
from harness.errors import EXIT_CODES, HarnessError
from harness.results.model import FORMAT, BuildOutcome, CellResult, RunRecord, Status

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import import_graph  # noqa: E402


def _table(text: str, header: str) -> list[list[str]]:
    """The rows of the Markdown table whose header line starts with `header`."""
    lines = text[text.index(header):].splitlines()
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def _room(name: str) -> str:
    name = name.removesuffix("/").removesuffix(".py")
    return "harness" if name == "harness/__init__" else name


def test_layout_floors_are_the_import_graph_floors() -> None:
    rows = _table((ROOT / "docs" / "layout.md").read_text(), "| floor | rooms |")
    documented = [{_room(n) for n in re.findall(r"`([^`]+)`", row[1])} for row in rows]
    assert documented == [set(f) for f in reversed(import_graph.FLOORS)]


def test_every_room_of_the_package_is_on_a_floor() -> None:
    rooms = {import_graph.room(m) for m in import_graph.modules(ROOT)}
    assert rooms == {r for floor in import_graph.FLOORS for r in floor}


def test_readme_exit_codes_are_the_code() -> None:
    rows = _table((ROOT / "README.md").read_text(), "| code | meaning |")
    assert {int(code): meaning for code, meaning in rows} == EXIT_CODES


def test_readme_stays_short_and_links_its_glossary() -> None:
    # a new user's page: what does not fit goes to docs/ (docs/glossary.md holds every term)
    text = (ROOT / "README.md").read_text()
    assert len(text.split()) <= 1500
    assert "docs/glossary.md" in text and (ROOT / "docs" / "glossary.md").is_file()


def test_every_error_class_exits_with_a_documented_code() -> None:
    classes = set()
    for mod in pkgutil.walk_packages(harness.__path__, "harness."):
        if mod.name.endswith("__main__"):
            continue
        for _, obj in inspect.getmembers(importlib.import_module(mod.name), inspect.isclass):
            if issubclass(obj, HarnessError):
                classes.add(obj)
    assert len(classes) > 5
    assert {c.__name__: c.exit_code for c in classes if c.exit_code not in EXIT_CODES} == {}


def _json_block(text: str, heading: str) -> str:
    section = text[text.index(heading):]
    return section[section.index("```json") + 7:section.index("```", section.index("```json") + 7)]


def _top_keys(block: str) -> set[str]:
    """The keys at the first nesting level of a documented JSON object (values may be prose)."""
    keys, depth = set(), 0
    for m in re.finditer(r'[{}\[\]]|"([A-Za-z_][A-Za-z0-9_.]*)"\s*:', block):
        tok = m.group(0)
        if tok in "{[":
            depth += 1
        elif tok in "}]":
            depth -= 1
        elif depth == 1:
            keys.add(m.group(1))
    return keys


@pytest.mark.parametrize(("heading", "model", "computed"), [
    ("## run.json", RunRecord, set()),
    ("## cells/<cell-key>.json", CellResult, {"reasons"}),
    ("## builds/<stack>.json", BuildOutcome, set()),
])
def test_results_format_documents_every_field(heading, model, computed) -> None:
    text = (ROOT / "docs" / "results-format.md").read_text()
    keys = _top_keys(_json_block(text, heading))
    assert keys == set(model.model_fields) | computed


def test_results_format_number_and_statuses() -> None:
    text = (ROOT / "docs" / "results-format.md").read_text()
    assert text.startswith(f"# Results format (v{FORMAT})")
    for heading in ("## run.json", "## cells/<cell-key>.json"):
        assert f'"format": {FORMAT},' in _json_block(text, heading)
    statuses = re.search(r'"status": ("pass".*)', _json_block(text, "## cells/<cell-key>.json")).group(1)
    assert re.findall(r'"([a-z-]+)"', statuses) == [s.value for s in Status]
