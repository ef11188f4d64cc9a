"""`harness env`: this host's fingerprint (harness/hostenv.py), as a table or JSON."""

from __future__ import annotations

import json

from rich.text import Text

from harness.console import out
from harness.hostenv import host_fingerprint
from harness.tables import Col, show


def register(sub) -> None:
    p = sub.add_parser("env", help="print the host fingerprint (GPU, driver, kernel, OS, Docker)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    fp = host_fingerprint().model_dump(mode="json")
    if args.json:
        out.print_json(json.dumps(fp))
        return 0
    rows = []
    for key, value in fp.items():
        if key == "gpus":
            value = "; ".join(f"{g['index']}: {g['name']} (cc {g['cc']}, {g['memory_gib']} GiB)"
                              for g in value) or "none"
        rows.append([Text(key), Text("-" if value is None else str(value))])
    show(out, "host fingerprint", [Col("key", whole=True), Col("value")], rows)
    return 0
