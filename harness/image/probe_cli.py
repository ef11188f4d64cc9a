"""`harness build --probe` output: per stack, per kernel family, the arch decision stock vs
patched, the cubins of the compiled object and the audit verdicts (SASS for FP4 GEMMs)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table
from rich.text import Text

from harness.console import out, printable
from harness.image.probe import PARTS, ProbeOutcome, probe_stack
from harness.image.stackbuild import StackBuild
from harness.results.build import CompileCache
from harness.safety.roots import Root


def cache_line(cache: CompileCache) -> str:
    if cache.off:
        return f"compile cache off: {cache.off}"
    rate = cache.hit_rate
    return (f"compile cache: {cache.hits} hits, {cache.misses} misses, {cache.uncacheable} uncacheable"
            + (f", hit rate {rate * 100:.1f} %" if rate is not None else "")
            + f", compile steps {cache.seconds_compiling} s")


def _cell(value: object) -> Text:
    """What a probe image printed, as a table cell: text (never markup), masked, bounded."""
    return Text(printable(str(value))[:4000])


def run_probes(builds: list[StackBuild], *, engine, log_dir: Path, force: bool = False,
               parts: tuple[str, ...] = PARTS) -> list[str]:
    """Probe each stack, print the tables, save probe-<stack>.json; returns the stacks that passed."""
    passed = []
    for build in builds:
        name = build.name
        o = probe_stack(build, engine=engine, log_dir=log_dir, force=force, parts=parts)
        if (p := o.packaging) is not None:
            table = Table(title=_cell(f"{name}: packaging probe {p.status} ({p.image_ref}, {p.duration_s:.0f} s)"))
            for col in ("installed", "Rust front end", "pip check", "platform"):
                table.add_column(col, overflow="fold")
            table.add_row(_cell(f"vllm {p.vllm}, flashinfer {p.flashinfer}, torch {p.torch}"), _cell(p.rust_frontend or "-"),
                          _cell("ok" if not p.pip_check or p.status == "pass" else "\n".join(p.pip_check[-5:])),
                          _cell(f"{p.machine}, Python {p.python}"))
            out.print(table)
            if p.installed_line:
                out.print(f"{name}: {p.installed_line[:300]}" + (" ..." if len(p.installed_line) > 300 else ""),
                          markup=False)
            if p.reason:
                out.print(f"{name}: packaging: {p.reason}", markup=False)
        if o.units_status == "skipped":
            out.print(f"{name}: probe {o.status}" + (f"; {o.reason}" if o.reason else ""), markup=False)
            _save(log_dir, name, o)
            if o.status == "pass":
                passed.append(name)
            continue
        table = Table(title=_cell(f"{name}: units probe {o.units_status} ({o.image_ref})"))
        for col in ("kernel family", "stock", "patched", "object cubins", "compile", "audit (SASS for FP4)"):
            table.add_column(col, overflow="fold")
        for r in o.rows:
            table.add_row(*map(_cell, (r.family, r.stock or "-", r.patched or "-", r.archs,
                                       f"{r.step_s:.0f} s" if r.step_s is not None else "-",
                                       "\n".join(r.verdicts) or "-")))
        out.print(table)
        t = o.timings
        conf = t.configure_s if t else None
        out.print(f"{name}: configure stock {conf.stock if conf else None} s, patched "
                  f"{conf.patched if conf else None} s; probed units compiled in {t.compile_s if t else None} s; "
                  f"probe image {(t.image_build_s if t else None) or 0:.0f} s" + (f"; {o.reason}" if o.reason else ""),
                  markup=False)
        if o.compile_cache is not None:
            out.print(f"{name}: {cache_line(o.compile_cache)}", markup=False)
        _save(log_dir, name, o)
        if o.status == "pass":
            passed.append(name)
    return passed


def _save(log_dir: Path, name: str, o: ProbeOutcome) -> None:
    # --log-dir is a root: a probe-*.json there that is a link is refused, never written through
    Root(log_dir, what="--log-dir", create=True).save_text(f"probe-{name}.json", json.dumps(o.as_json(), indent=1))
