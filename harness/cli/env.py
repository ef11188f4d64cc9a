"""`harness env`: this host's fingerprint (harness/hostenv.py), as a table or JSON."""

from __future__ import annotations

import json

from rich.table import Table

from harness.console import out
from harness.hostenv import host_fingerprint


def register(sub) -> None:
    p = sub.add_parser("env", help="print the host fingerprint (GPU, driver, kernel, OS, Docker)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    fp = host_fingerprint()
    if args.json:
        out.print_json(json.dumps(fp))
        return 0
    table = Table(title="host fingerprint", show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in fp.items():
        if key == "gpus":
            value = "; ".join(f"{g['index']}: {g['name']} (cc {g['cc']}, {g['memory_gib']} GiB)"
                              for g in value) or "none"
        table.add_row(key, "-" if value is None else str(value))
    out.print(table)
    return 0
