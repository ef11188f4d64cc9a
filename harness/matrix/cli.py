"""`harness plan`: expand the matrix, show each cell, the image it needs, and the groups."""

from __future__ import annotations

import argparse
import json

from rich.table import Table

from harness.build.identity import image_ref
from harness.console import out
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
    images = {s: image_ref(matrix, s) for s in group_by_stack(cells)}
    return [
        {"id": c.id, "stack": c.stack_name, "model": c.model_name, "config": c.config_name,
         "quantization": c.quantization, "runner": c.stack.runner, "image": images[c.stack_name]}
        for c in cells
    ]


def run(args) -> int:
    matrix = load_matrix(args.matrix)
    rows = plan_rows(matrix, args.k)
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
    table = Table(title=f"{matrix.spec.matrix.name}: {len(rows)} cells, {len(groups)} images "
                        f"(hardware {matrix.spec.matrix.hardware})")
    for col in ("cell", "quant", "runner", "image"):
        table.add_column(col, overflow="fold")
    for image, members in groups.items():
        for i, r in enumerate(members):
            table.add_row(r["id"], r["quantization"], r["runner"], image if i == 0 else "〃")
        table.add_section()
    out.print(table)
    return 0
