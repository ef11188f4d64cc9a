"""Every table is data (harness/tables.py): a string cell is never read as rich markup, every cell
is masked by the rule `--json` follows, and cells and tables are bounded before any layout."""

from __future__ import annotations

import io

from rich.console import Console
from rich.text import Text

from harness import tables
from harness.tables import Col, show

SECRET = "Zq7hunter2Secret9Xw"


def _shown(rows, width=120, cols=None) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, highlight=False)
    show(console, "t [/red]", cols or [Col("key", whole=True), Col("value")], rows)
    return buf.getvalue()


def test_markup_in_a_string_cell_is_text():
    text = _shown([["a", "[/red] [bold]x[/bold] [link=file:///etc/passwd]y"]])
    assert "[/red] [bold]x[/bold] [link=file:///etc/passwd]y" in text and "t [/red]" in text


def test_every_cell_is_masked_string_or_text_in_both_layouts():
    rows = [["a", f"HF_TOKEN={SECRET}"], [Text("b"), Text(f"https://u:{SECRET}@h/x", style="red")],
            ["c", f"curl -u user:{SECRET} -p{SECRET}"]]
    for width in (200, 40):  # the grid, and the list layout
        text = _shown(rows, width)
        assert SECRET not in text and "***" in text


def test_a_huge_cell_is_cut_and_said():
    text = _shown([["line", "x" * (5 << 20)]])
    assert len(text) < 4 * tables.MAX_CELL_CHARS and f"({(5 << 20) - tables.MAX_CELL_CHARS} more characters)" in text


def test_a_cell_of_many_lines_is_cut_and_said():
    text = _shown([["reqs", "\n".join(f"pkg{i}>=1" for i in range(60_000))]])
    assert "pkg0>=1" in text and "pkg60000" not in text and "more lines)" in text


def test_a_table_of_many_rows_is_cut_and_said():
    text = _shown([[f"r{i}", "v"] for i in range(tables.MAX_ROWS + 5)])
    assert "(5 more rows)" in text and f"r{tables.MAX_ROWS + 4}" not in text


def test_a_secret_at_the_bound_is_masked_whole():
    cell = "x" * (tables.MAX_CELL_CHARS - 10) + f" HF_TOKEN={SECRET}" + "y" * 100
    assert SECRET[:8] not in _shown([["k", cell]])
