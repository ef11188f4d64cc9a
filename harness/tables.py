"""Terminal tables that stay readable at any width, 80 columns included.

A table is printed as a grid when it fits the console; when it does not, as a list (one block per
row, "column: value" lines wrapped between words only). Columns marked `whole` hold what a user copies
(cell ids, image tags, engine URLs, kernel names, arch names, paths): they are never folded and
never cut with an ellipsis, in either layout. The title is printed on its own line, since rich
folds a title inside the table's width. Cells may carry rich markup (or be `Text`).
"""

from __future__ import annotations

import io
import textwrap
from dataclasses import dataclass

from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

ELLIPSIS = "…"


@dataclass(frozen=True)
class Col:
    name: str
    whole: bool = False  # an id, a name, a URL: printed on one line, never cut
    justify: JustifyMethod = "left"


def _text(cell) -> Text:
    return cell if isinstance(cell, Text) else Text.from_markup(str(cell))


def _grid(cols: list[Col], rows: list[list], sections: set[int]) -> Table:
    t = Table(title=None)
    for c in cols:
        if c.whole:
            t.add_column(c.name, justify=c.justify, no_wrap=True, overflow="ellipsis")
        else:
            t.add_column(c.name, justify=c.justify, overflow="fold")
    for i, r in enumerate(rows):
        t.add_row(*[_text(x) for x in r], end_section=i in sections)
    return t


def _fits(table: Table, width: int, rows: list[list]) -> bool:
    """Rendered at `width`, does the grid keep every word of every cell on one line? rich folds a
    word longer than its column and cuts a no_wrap column with an ellipsis when nothing else can
    give way; either shows as a word missing from the rendered text, or an extra ellipsis."""
    buf = io.StringIO()
    probe = Console(file=buf, width=width, color_system=None, highlight=False)
    probe.print(table)
    shown = buf.getvalue()
    plain = [_text(x).plain for r in rows for x in r]
    if shown.count(ELLIPSIS) > sum(p.count(ELLIPSIS) for p in plain):
        return False
    return all(word in shown for p in plain for word in set(p.split()))


def show(console: Console, title: str | None, cols: list[Col], rows: list[list], *,
         sections: set[int] | None = None) -> None:
    """Print `rows` under `title` as a grid if it fits `console`'s width, else as a list."""
    if title:
        console.print(title, markup=False, highlight=False, soft_wrap=True)
    width = max(40, console.size.width)
    table = _grid(cols, rows, sections or set())
    if _fits(table, width, rows):
        console.print(table)
        return
    for r in rows:
        cells = [_text(x).plain for x in r]
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
