"""The answer of a bisect as Markdown: a section a bug report can include as it is."""

from __future__ import annotations

from harness.bisect.history import HistorySpec
from harness.bisect.probes import Decision
from harness.bisect.store import BisectResult, Side


def _decision(d: Decision | None) -> str:
    if not d:
        return ""
    return "; ".join(f"{k}: {', '.join(v) if isinstance(v, list) else v}" for k, v in d.items())


def _what(history: HistorySpec) -> str:
    if history.kind == "releases":
        return f"releases of `{history.project}` {history.good} .. {history.bad}"
    return f"commits of `{history.repo}` {history.good[:12]} .. {history.bad[:12]}"


def _cell(side: Side) -> str:
    return (_decision(side.decision) or side.reason or "").replace("|", "\\|")


def markdown(result: BisectResult, command: str = "", max_diff_lines: int = 150) -> str:
    h, probe = result.history, result.probe
    noun = "release" if h.kind == "releases" else "commit"
    lines = [f"## Bisect: the first bad {noun}", ""]
    fb = result.first_bad
    if fb:
        lines.append(f"First bad {noun}: **{fb.id}** {fb.title} ({fb.date})")
    elif result.done:
        ids = ", ".join(s.id[:12] for s in result.suspects)
        lines.append(f"The first bad {noun} is one of: {ids} (the others were skipped: see the steps)")
    else:
        lines.append("Not finished: resume it with `harness bisect --resume DIR`.")
    lines += ["", f"Over the {_what(h)} ({result.points} points), probe `{probe.probe}`"
              + (f" with TORCH_CUDA_ARCH_LIST={probe.torch_cuda_arch_list}" if probe.torch_cuda_arch_list
                 else "") + ".", ""]
    if result.reference is not None:
        lines += ["A point is bad when its decision differs from the good endpoint's "
                  f"({_decision(result.reference)}).", ""]
    lg, bs = result.last_good, result.bad_side
    lines += [f"| side | {noun} | verdict | what the probe saw |", "|---|---|---|---|",
              f"| last good | {lg.id[:12]} {lg.title} | {lg.verdict} | {_cell(lg)} |",
              f"| first bad | {bs.id[:12]} {bs.title} | {bs.verdict} | {_cell(bs)} |", "",
              f"Steps ({len(result.steps)} judged, {result.seconds:.0f} s of probing):", "",
              f"| step | {noun} | verdict | reason | seconds |", "|---|---|---|---|---|"]
    for s in result.steps:
        reason = s.reason.replace("|", "\\|")[:160]
        lines.append(f"| {s.step} | {s.id[:12]} | {s.verdict} | {reason} | {s.seconds:.0f} |")
    lines += _cmake(result, noun, max_diff_lines)
    if command:
        lines += ["", "Reproduce:", "", "```", command, "```"]
    return "\n".join(lines) + "\n"


def _cmake(result: BisectResult, noun: str, max_lines: int = 150) -> list[str]:
    diff = result.cmake_diff
    if diff is None:
        return []
    out = ["", f"### What changed in the CMake ({diff.from_ or '?'} -> {diff.to or '?'})", ""]
    if diff.error is not None:
        return out + [f"Not compared: {diff.error}"]
    commits = result.cmake_commits or []
    for c in commits:
        out.append(f"- {c.id[:12]} {c.date} {c.title}")
    if commits:
        out.append("")
    text = diff.text.splitlines()
    if not text:
        return out + ["No hunk of CMakeLists.txt or cmake/*.cmake touches an arch list."]
    shown = text[:max_lines]
    out += [f"The hunks of CMakeLists.txt and cmake/*.cmake that touch an arch list ({diff.hunks}; "
            f"all of them in `{diff.file}`):", "", "```diff", *shown, "```"]
    if len(text) > max_lines:
        out.append(f"({len(text) - max_lines} more lines in `{diff.file}`)")
    return out
