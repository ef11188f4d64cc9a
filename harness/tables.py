"""Terminal tables that stay readable at any width, 80 columns included.

A table is printed as a grid when it fits the console; when it does not, as a list (one block per
row, "column: value" lines wrapped between words only). Columns marked `whole` hold what a user copies
(cell ids, image tags, engine URLs, kernel names, arch names, paths): they are never folded and
never cut with an ellipsis, in either layout. The title is printed on its own line, since rich
folds a title inside the table's width.

A cell is data: a string is shown as it stands (never read as markup: a commit subject holding
`[/red]` is text), a `Text` carries the caller's style. Every cell is masked
(harness.redact, the rule `--json` follows) and bounded before anything is laid out: at most
MAX_CELL_CHARS characters and MAX_CELL_LINES lines, the rest said in words, and a table shows
at most MAX_ROWS rows (a 50 MB log line or a 60,000-line file is a few lines here, in time
linear in what is shown).
"""

from __future__ import annotations

import io
import re
import textwrap
from dataclasses import dataclass

from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from harness.redact import terminal_text

ELLIPSIS = "…"
MAX_CELL_CHARS = 2000
MAX_CELL_LINES = 60
MAX_ROWS = 2000
# a secret cut in two by the bound would show its first half unmasked: the text is masked with
# this much more than is shown, then cut
_MASK_MARGIN = 4096
_BOX = re.compile(r"[\s\u2500-\u257f]+")  # whitespace and the box-drawing characters rich draws


@dataclass(frozen=True)
class Col:
    name: str
    whole: bool = False  # an id, a name, a URL: printed on one line, never cut
    justify: JustifyMethod = "left"


def _text(cell) -> Text:
    """A cell as it is shown: masked, control characters as `?`, cut to the bounds."""
    t = cell if isinstance(cell, Text) else Text(str(cell))
    if len(t.plain) > MAX_CELL_CHARS + _MASK_MARGIN:
        t = t[: MAX_CELL_CHARS + _MASK_MARGIN]
    shown = terminal_text(t.plain)
    if shown != t.plain:
        t = Text(shown, style=t.style)
    plain = t.plain
    if len(plain) > MAX_CELL_CHARS:
        cut = len(cell.plain if isinstance(cell, Text) else str(cell)) - MAX_CELL_CHARS
        t = t[:MAX_CELL_CHARS]
        t.append(f" {ELLIPSIS} ({cut} more characters)")
        plain = t.plain
    if plain.count("\n") >= MAX_CELL_LINES:
        lines = plain.split("\n")
        keep = len("\n".join(lines[: MAX_CELL_LINES - 1]))
        t = t[:keep]
        t.append(f"\n{ELLIPSIS} ({len(lines) - MAX_CELL_LINES + 1} more lines)")
    return t


def _bounded(rows: list[list]) -> list[list[Text]]:
    cells = [[_text(x) for x in r] for r in rows[:MAX_ROWS]]
    if len(rows) > MAX_ROWS and rows:
        more = Text(f"{ELLIPSIS} ({len(rows) - MAX_ROWS} more rows)")
        cells.append([more] + [Text("") for _ in rows[0][1:]])
    return cells


def _grid(cols: list[Col], rows: list[list], sections: set[int]) -> Table:
    t = Table(title=None)
    for c in cols:
        if c.whole:
            t.add_column(c.name, justify=c.justify, no_wrap=True, overflow="ellipsis")
        else:
            t.add_column(c.name, justify=c.justify, overflow="fold")
    for i, r in enumerate(rows):
        t.add_row(*r, end_section=i in sections)
    return t


def _fits(table: Table, width: int, rows: list[list[Text]]) -> bool:
    """Rendered at `width`, does the grid keep every word of every cell on one line? rich folds a
    word longer than its column and cuts a no_wrap column with an ellipsis when nothing else can
    give way; either shows as a word missing from the words of the rendered text, or an extra
    ellipsis. (Words are looked up in a set: linear in the size of the table.)"""
    buf = io.StringIO()
    probe = Console(file=buf, width=width, color_system=None, highlight=False)
    probe.print(table)
    shown = buf.getvalue()
    plain = [x.plain for r in rows for x in r]
    if shown.count(ELLIPSIS) > sum(p.count(ELLIPSIS) for p in plain):
        return False
    words = set(_BOX.split(shown))
    return all(word in words for p in plain for word in _BOX.split(p) if word)


def show(console: Console, title: str | None, cols: list[Col], rows: list[list], *,
         sections: set[int] | None = None) -> None:
    """Print `rows` under `title` as a grid if it fits `console`'s width, else as a list."""
    if title:
        console.print(terminal_text(title), markup=False, highlight=False, soft_wrap=True)
    width = max(40, console.size.width)
    rows = _bounded(rows)
    table = _grid(cols, rows, sections or set())
    if _fits(table, width, rows):
        console.print(table)
        return
    for r in rows:
        cells = [x.plain for x in r]
        head = next((i for i, c in enumerate(cols) if c.whole and cells[i]), 0)
        if cells[head].strip():  # an empty head continues the block above (a verdict's log lines)
            console.print(f"- {cols[head].name}: {cells[head]}", markup=False, highlight=False, soft_wrap=True)
        for i, (c, v) in enumerate(zip(cols, cells, strict=True)):
            if i == head or not v.strip():
                continue
            for n, line in enumerate(v.splitlines()):
                prefix = f"    {c.name}: " if n == 0 else " " * (6 + len(c.name))
                for part in textwrap.wrap(line, width=width, initial_indent=prefix,
                                          subsequent_indent=" " * (6 + len(c.name)),
                                          break_long_words=False, break_on_hyphens=False) or [prefix]:
                    console.print(part, markup=False, highlight=False, soft_wrap=True)
