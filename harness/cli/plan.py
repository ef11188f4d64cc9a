"""`harness plan`: expand the matrix, show each cell, the image it needs, and the groups."""

from __future__ import annotations

import argparse
import json

from harness.console import out
from harness.errors import ConfigError, MatrixError
from harness.image.identity import image_ref, served_image
from harness.image.stackbuild import resolve
from harness.matrix.load import load_matrix
from harness.matrix.plan import expand, group_by_stack

DEFAULT_MATRIX = "matrix/spark.toml"


def add_matrix_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--matrix", default=DEFAULT_MATRIX, help=f"matrix file (default {DEFAULT_MATRIX})")
    p.add_argument("-k", dest="k", default=None, metavar="EXPR",
                   help="select cells by substring / boolean expression, as pytest -k")


def register(sub) -> None:
    p = sub.add_parser("plan", help="expand the matrix into cells and show the images they need")
    add_matrix_args(p)
    p.add_argument("--json", action="store_true", help="print the cells as JSON")
    p.add_argument("--list", action="store_true", help="print only the cell ids, one a line")
    p.set_defaults(func=run)


def plan_rows(matrix, k: str | None) -> list[dict]:
    cells = expand(matrix, k)
    stacks = list(group_by_stack(cells))
    # a local stack runs its install and a prebuilt `image =` stack is served as named; the others
    # are resolved as the build resolves them (the lock applied, for this host's CPU) and rendered
    built = [s for s in stacks if served_image(matrix.spec.stacks[s]) is None]
    images = {s: served_image(matrix.spec.stacks[s]) for s in stacks} | {
        b.name: image_ref(b) for b in resolve(matrix, built)}
    rows = [
        {"id": c.id, "stack": c.stack_name, "model": c.model_name, "config": c.config_name,
         "quantization": c.quantization, "runner": c.stack.runner, "image": images[c.stack_name],
         # NVFP4: the FP8 cell of this run it is judged against (harness.matrix.pairs), or None
         **({"compare_with": c.compare_with} if c.quantization == "nvfp4" else {})}
        for c in cells
    ]
    if matrix.spec.hosts:
        for row, where in zip(rows, host_rows(matrix, cells), strict=True):
            row.update(where)
    return rows


def host_rows(matrix, cells) -> list[dict]:
    """Per cell: the hosts it may run on, the GPUs it needs, and the slot it would take first if
    every cell took equally long (the live order depends on real durations)."""
    from harness.run import schedule as hostmod
    from harness.run.schedule import execution_order

    hosts = hostmod.hosts_of(matrix)
    where = hostmod.placement(cells, hosts, matrix)
    need = {c.id: hostmod.gpus_needed(c, matrix) for c in cells}
    order = [c.id for c in execution_order(cells) if c.config.nodes == 1]
    first = {p.cell: p for p in hostmod.simulate(order, hosts, where, need, lambda _c: 1.0)}
    waves = max((int(p.start) + 1 for p in first.values()), default=0)
    out = []
    for c in cells:
        p = first.get(c.id)
        slot, wave = (f"{p.host}#{p.slot}", int(p.start) + 1) if p else (None, None)
        if c.config.nodes > 1 and len(where[c.id]) >= c.config.nodes:  # after the others, alone
            slot, wave = "+".join(where[c.id][:c.config.nodes]), waves + 1
            waves += 1
        out.append({"hosts": list(where[c.id]), "gpus_needed": need[c.id], "nodes": c.config.nodes,
                    "slot": slot, "wave": wave,
                    "unplaceable": None if where[c.id] else
                    "; ".join(hostmod.why_not(c, h, matrix) or "" for h in hosts)})
    return out


def run(args) -> int:
    from harness.matrix.mounts import node_problems
    from harness.run.schedule import arch_refusals

    matrix = load_matrix(args.matrix)
    if problems := arch_refusals(expand(matrix, args.k), matrix):
        raise MatrixError(str(matrix.path), problems)
    rows = plan_rows(matrix, args.k)
    if args.k and not rows:
        raise ConfigError(f"{matrix.path}: no cell matches -k {args.k!r}", hint="see `harness plan -m ... --list`")
    node_problems(rows, matrix)  # a cell spanning more machines than can take it is refused here
    if args.json:
        out.print_json(json.dumps(rows))
        return 0
    if args.list:
        for r in rows:
            out.print(r["id"], markup=False)
        return 0
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["image"], []).append(r)
    from rich.text import Text

    from harness.tables import Col, show

    hosts = bool(matrix.spec.hosts)
    judged = matrix.spec.expect.nvfp4_over_fp8_min_ratio is not None
    cols = [Col("cell", whole=True), Col("quant"), Col("judged against", whole=True), Col("runner"),
            Col("image", whole=True),
            *((Col("hosts"), Col("slot")) if hosts else ())]
    table_rows, ends = [], set()
    for image, members in groups.items():
        for r in members:
            extra: tuple[str, ...] = ()
            if hosts:
                extra = (", ".join(r["hosts"]) or f"none: {r['unplaceable']}",
                         f"{r['slot']} (wave {r['wave']})" if r["slot"] else "-")
            # the image on every row: a row copied alone (or a list block) must say which it is
            against = "-"
            if r["quantization"] == "nvfp4":
                against = (r["compare_with"] or "none") if judged else "none (no ratio rule)"
            table_rows.append([Text(r["id"]), Text(r["quantization"]), Text(against), Text(r["runner"]), Text(image),
                               *map(Text, extra)])
        ends.add(len(table_rows) - 1)
    show(out, f"{matrix.spec.matrix.name}: {len(rows)} cells, {len(groups)} images "
              f"(hardware {matrix.spec.matrix.hardware})", cols, table_rows, sections=ends)
    if hosts:
        from harness.run import schedule as hostmod

        for h in hostmod.hosts_of(matrix):
            gpus = "all" if h.gpus is None else (",".join(h.gpus) or "none")
            out.print(f"host {h.name}: {h.url or 'DOCKER_HOST / local socket'}, hardware {h.hardware} "
                      f"(cc {h.cc}), gpus {gpus}, {h.slots} slot(s), network {h.network}", markup=False)
    return 0
