"""The docs that describe the code are held to it: a change to one without the other fails here.

docs/layout.md's floors against tools/import_graph.py FLOORS, its `type: ignore` table against
the code and its "one type per concept" against the classes that copy a matrix table;
docs/results-format.md's records against the record classes, the format number, run.json's
matrix copy, schedule.json's keys and the cross-check file's path; results/model.py's and
safety/__init__.py's docstrings against the format and the package; README's and
docs/building.md's compile-cache figures against examples/h200-cache; README's exit-code table
against harness.errors.EXIT_CODES (which `harness --help` prints), and every error class's code."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path

import pytest

import harness
from harness.audit.report import AuditState, AuditSummary
from harness.errors import EXIT_CODES, HarnessError
from harness.results.build import BuildOutcome, BuildStatus
from harness.results.model import FORMAT, CellResult, RunRecord, ServeState, Status
from harness.results.partial import PartialCell

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
    ("### The audit (builds/<stack>.json `audit`)", AuditSummary, set()),
    ("## cells/<cell-key>.partial.json", PartialCell, set()),
])
def test_results_format_documents_every_field(heading, model, computed) -> None:
    text = (ROOT / "docs" / "results-format.md").read_text()
    keys = _top_keys(_json_block(text, heading))
    assert keys == set(model.model_fields) | computed


def test_results_format_number_and_statuses() -> None:
    text = (ROOT / "docs" / "results-format.md").read_text()
    assert text.startswith(f"# Results format (v{FORMAT})")
    for heading in ("## run.json", "## cells/<cell-key>.json", "## builds/<stack>.json"):
        assert f'"format": {FORMAT},' in _json_block(text, heading)
    statuses = re.search(r'"status": ("pass".*)', _json_block(text, "## cells/<cell-key>.json")).group(1)
    assert re.findall(r'"([a-z-]+)"', statuses) == [s.value for s in Status]


def _keys_at(block: str, depth_wanted: int, after: str | None = None) -> set[str]:
    """The keys at one nesting depth of a documented JSON value (from `after` on, when given:
    the keys of the object that follows it)."""
    if after is not None:
        block = block[block.index(after) + len(after):]
    keys, depth = set(), 0
    for m in re.finditer(r'[{}\[\]]|"([A-Za-z_][A-Za-z0-9_.]*)"\s*:', block):
        tok = m.group(0)
        if tok in "{[":
            depth += 1
        elif tok in "}]":
            depth -= 1
            if depth < 0:
                break
        elif depth == depth_wanted:
            keys.add(m.group(1))
    return keys


def test_run_json_documents_every_key_of_its_matrix_copy() -> None:
    from harness.results.model import MatrixInfo

    block = _json_block((ROOT / "docs" / "results-format.md").read_text(), "## run.json")
    assert _keys_at(block, 0, after='"matrix": {') == set(MatrixInfo.model_fields)


def test_schedule_json_documents_its_record() -> None:
    from harness.results.schedule import ScheduleEntry

    text = (ROOT / "docs" / "results-format.md").read_text()
    assert "  schedule.json " in text  # in the folder's tree
    block = _json_block(text, "## schedule.json")
    inner = block[block.index("{") + 1:block.rindex("}")]
    assert set(re.findall(r'"([a-z_]+)":', inner)) == set(ScheduleEntry.model_fields)
    assert 'store.dir / "schedule.json"' in (ROOT / "harness" / "run" / "executor.py").read_text()


def test_the_cross_check_file_is_where_the_doc_says() -> None:
    text = (ROOT / "docs" / "results-format.md").read_text()
    assert "## logs/<cell-key>.cross-check.json" in text and "  logs/<cell-key>.cross-check.json " in text
    assert 'store.dir / "logs" / f"{cell_key(cell.id)}.cross-check.json"' in (
        ROOT / "harness" / "run" / "cell.py").read_text()


def test_layout_names_every_type_ignore_with_its_error_code() -> None:
    found = set()
    for path in sorted((ROOT / "harness").rglob("*.py")):
        for line in path.read_text().splitlines():
            if "type: ignore" in line:
                m = re.search(r"# type: ignore\[([a-z-]+)\]", line)
                assert m, f"{path}: a type: ignore without its error code"
                found.add((str(path.relative_to(ROOT / "harness")), m.group(1)))
    rows = _table((ROOT / "docs" / "layout.md").read_text(), "| file | error | why |")
    assert {(r[0].strip("`"), r[1].strip("`")) for r in rows} == found


def test_layout_names_the_classes_that_copy_a_matrix_table() -> None:
    """'One type per concept' says where it holds and where it does not: the results classes
    that mirror a matrix class are the ones the paragraph names."""
    from harness.bench.result import BenchResult
    from harness.fingerprint.verdicts import Verdict
    from harness.results import model

    assert model.BenchRecord is BenchResult and model.Verdict is Verdict
    mirrors = {}
    for name, cls in inspect.getmembers(model, inspect.isclass):
        if cls.__module__ == model.__name__ and (m := re.search(r"harness\.matrix\.model\.(\w+)", cls.__doc__ or "")):
            mirrors[name] = m.group(1)
    text = (ROOT / "docs" / "layout.md").read_text()
    paragraph = text[text.index("One type per concept"):text.index("\n\n", text.index("One type per concept"))]
    assert dict(re.findall(r"`(\w+Info)` for `(\w+)`", paragraph)) == mirrors


def test_docstrings_name_the_format_and_the_modules() -> None:
    from harness import safety
    from harness.results import model

    assert f"Results format v{FORMAT} " in model.__doc__
    modules = {p.stem for p in (ROOT / "harness" / "safety").glob("*.py") if p.stem != "__init__"}
    assert set(re.findall(r"`(\w+)`", safety.__doc__)) == modules


def test_readme_and_building_quote_the_cache_visit_the_example_holds() -> None:
    """examples/h200-cache/summary.txt is what the H200 visit printed; both docs quote it."""
    summary = (ROOT / "examples" / "h200-cache" / "summary.txt").read_text()
    wall = {m[0]: float(m[1]) for m in re.findall(r"^(\w+): status built, harness build wall ([\d.]+) s", summary, re.M)}
    hits, misses = map(int, re.search(r"^oneline: .*hits (\d+), misses (\d+)", summary, re.M).groups())
    cold, one = round(wall["cold"]), round(wall["oneline"])
    readme = " ".join((ROOT / "README.md").read_text().split())
    building = " ".join((ROOT / "docs" / "building.md").read_text().split())
    assert f"took {cold} s cold and {one} s after a one-line kernel change" in readme
    assert f"cold {cold} s for the whole `harness build`, one kernel line changed {one} s" in building
    assert f"({hits} of {hits + misses} from the cache" in building


@pytest.mark.parametrize(("heading", "line", "enum"), [
    ("## builds/<stack>.json", r'"status": ("built".*)', BuildStatus),
    ("### The audit (builds/<stack>.json `audit`)", r'^  "status": (.*)', AuditState),
    ("## cells/<cell-key>.json", r'"state": ("ready".*)', ServeState),
    ("## cells/<cell-key>.partial.json", r'"state": ("ready".*)', ServeState),
])
def test_results_format_lists_every_value_of_each_status(heading, line, enum) -> None:
    block = _json_block((ROOT / "docs" / "results-format.md").read_text(), heading)
    values = re.search(line, block, re.MULTILINE).group(1).split("(")[0]
    assert re.findall(r'"([a-z-]+)"', values) == [s.value for s in enum]
