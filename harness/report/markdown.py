"""report.md: the sections as GitHub-flavoured Markdown tables, readable in a terminal too."""

from __future__ import annotations

from harness.redact import redact_text
from harness.report.sections import BAD, GOOD, WARN, Section, Td

_SIGN = {BAD: "✗ ", WARN: "⚠ ", GOOD: ""}


def _cell(td: Td) -> str:
    text = td.text.replace("|", "\\|").replace("\n", " ")
    if td.tone in (BAD, WARN):
        return f"**{_SIGN[td.tone]}{text}**"
    return text


def _section(s: Section) -> list[str]:
    out = [f"## {s.title}", ""]
    out += [*s.notes, ""] if s.notes else []
    if s.rows:
        out.append("| " + " | ".join(s.headers) + " |")
        out.append("|" + "---|" * len(s.headers))
        out += ["| " + " | ".join(_cell(td) for td in row) + " |" for row in s.rows]
        out.append("")
    if s.items:
        out += [f"- {_cell(td)}" for td in s.items] + [""]
    if s.figure:
        out += [f"_Plot: see report.html ({s.figure.replace('_', ' ')})._", ""]
    return out


def render(header: list[tuple[str, str]], sections: list[Section]) -> str:
    lines = ["# harness report", ""]
    lines += [f"- **{k}**: {v}" for k, v in header] + [""]
    for s in sections:
        lines += _section(s)
    return redact_text("\n".join(lines).rstrip() + "\n")
