"""`harness build --probe` output: per stack, per kernel family, the arch decision stock vs
patched, the cubins of the compiled object and the audit verdicts (SASS for FP4 GEMMs)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from rich.table import Table

from harness.build.probe import probe_stack
from harness.console import out


def cache_line(cache: dict | None) -> str:
    if cache is None:
        return "compile cache: no compile step ran (the engine's layer cache had it)"
    if cache.get("off"):
        return f"compile cache off: {cache['off']}"
    rate = cache.get("hit_rate")
    return (f"compile cache: {cache.get('hits')} hits, {cache.get('misses')} misses, "
            f"{cache.get('uncacheable')} uncacheable"
            + (f", hit rate {rate * 100:.1f} %" if rate is not None else "")
            + f", compile steps {cache.get('seconds_compiling')} s")


def run_probes(matrix, stacks: list[str], *, engine, log_dir: Path, force: bool = False) -> list[str]:
    """Probe each stack, print the table, save probe-<stack>.json; returns the stacks that passed."""
    passed = []
    for name in stacks:
        o = probe_stack(matrix, name, engine=engine, log_dir=log_dir, force=force)
        table = Table(title=f"{name}: probe {o.status} ({o.image_ref})")
        for col in ("kernel family", "stock", "patched", "object cubins", "audit (SASS for FP4)"):
            table.add_column(col, overflow="fold")
        for r in o.rows:
            table.add_row(r.family, r.stock or "-", r.patched or "-", r.archs, "\n".join(r.verdicts) or "-")
        out.print(table)
        t = o.timings
        conf = t.get("configure_s") or {}
        out.print(f"{name}: configure stock {conf.get('stock')} s, patched {conf.get('patched')} s; probed units "
                  f"compiled in {t.get('compile_s')} s; "
                  f"probe image {t.get('image_build_s') or 0:.0f} s" + (f"; {o.reason}" if o.reason else ""),
                  markup=False)
        out.print(f"{name}: {cache_line(o.compile_cache)}", markup=False)
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / f"probe-{name}.json").write_text(json.dumps(
            {**asdict(o), "rows": [asdict(r) for r in o.rows]}, indent=1))
        if o.status == "pass":
            passed.append(name)
    return passed
