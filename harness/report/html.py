"""report.html: one self-contained page (inline CSS, inline SVG plots, no URLs)."""

from __future__ import annotations

import html

from harness.redact import redact_text
from harness.report.sections import FigureKey, Section, Td

_CSS = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #1d1d1f; max-width: 1400px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #d0d0d0; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.bad { background: #fde2e2; color: #9b0000; font-weight: 600; }
td.warn { background: #fff4d6; color: #7a5200; }
td.good { color: #1b5e20; }
li.bad { color: #9b0000; font-weight: 600; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; font-size: 14px; }
dt { font-weight: 600; } dd { margin: 0; }
.figure svg { max-width: 100%; height: auto; }
.note { color: #555; font-size: 13px; }
"""


def _t(text: str) -> str:
    """Every shown string passes redaction, then escaping."""
    return html.escape(redact_text(text))


def _td(td: Td) -> str:
    cls = f' class="{td.tone}"' if td.tone else ""
    return f"<td{cls}>{_t(td.text)}</td>"


def _section(s: Section, figures: dict[FigureKey, str | None]) -> list[str]:
    out = [f'<section id="{s.key}"><h2>{_t(s.title)}</h2>']
    out += [f'<p class="note">{_t(n)}</p>' for n in s.notes]
    if s.figure and (svg := figures[s.figure]):
        out.append(f'<div class="figure">{svg}</div>')
    if s.rows:
        out.append("<table><thead><tr>" + "".join(f"<th>{_t(h)}</th>" for h in s.headers))
        out.append("</tr></thead><tbody>")
        out += ["<tr>" + "".join(_td(td) for td in row) + "</tr>" for row in s.rows]
        out.append("</tbody></table>")
    if s.items:
        out.append("<ul>" + "".join(f'<li class="{td.tone}">{_t(td.text)}</li>' for td in s.items))
        out.append("</ul>")
    out.append("</section>")
    return out


def render(
    header: list[tuple[str, str]], sections: list[Section], figures: dict[FigureKey, str | None]
) -> str:
    """`figures` holds SVG text made here by matplotlib, the one thing not escaped."""
    title = _t(f"harness report {dict(header)['run']}")  # sections.header: run first
    body = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">']
    body += [f"<title>{title}</title>", f"<style>{_CSS}</style></head><body>"]
    body.append(f"<h1>{title}</h1><dl>")
    body += [f"<dt>{_t(k)}</dt><dd>{_t(v)}</dd>" for k, v in header]
    body.append("</dl>")
    body.append("<nav>" + " · ".join(f'<a href="#{s.key}">{_t(s.title)}</a>' for s in sections))
    body.append("</nav>")
    for s in sections:
        body += _section(s, figures)
    body.append("</body></html>")
    return "\n".join(body) + "\n"
