"""`harness fingerprint LOG`: read a vLLM log and show what it proves."""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table
from rich.text import Text

from harness.console import out
from harness.errors import ConfigError
from harness.fingerprint.parse import fingerprint
from harness.fingerprint.verdicts import verdicts


def register(sub) -> None:
    p = sub.add_parser(
        "fingerprint", help="read a vLLM server log: selected kernels, KV cache, known failures"
    )
    p.add_argument(
        "log", metavar="LOG", help="vLLM server log file ('-' is not accepted: save it first)"
    )
    p.add_argument("--json", action="store_true", help="print the fingerprint and verdicts as JSON")
    p.add_argument("--moe", default=None, help="judge against this --moe-backend request")
    p.add_argument("--linear", default=None, help="judge against this --linear-backend request")
    p.add_argument(
        "--attention", default=None, help="judge against this --attention-backend request"
    )
    p.add_argument(
        "--max-autotuner-skips",
        type=int,
        default=0,
        help="skipped tactics allowed per op (default 0)",
    )
    p.add_argument(
        "--running",
        action="store_true",
        help="the server is still running: an unfinished graph capture is not a hang yet",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    path = Path(args.log)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(
            f"cannot read log {path}: {exc.strerror}", hint="pass the path of a saved server log"
        ) from exc
    fp = fingerprint(text, process_ended=not args.running)
    # Requests named on the command line win; otherwise judge against what the log says was asked.
    vs = verdicts(
        fp,
        requested_moe=args.moe or fp.requested.get("moe_backend"),
        requested_linear=args.linear or fp.requested.get("linear_backend"),
        requested_attention=args.attention or fp.requested.get("attention_backend"),
        max_autotuner_skips=args.max_autotuner_skips,
        require_selection=bool(args.moe or args.linear or args.attention),
    )
    if args.json:
        out.print_json(
            json.dumps(
                {
                    "log": str(path),
                    "fingerprint": fp.to_json(),
                    "verdicts": [v.to_json() for v in vs],
                }
            )
        )
        return 0

    data = fp.to_json()
    table = Table(title=f"fingerprint of {path}")
    table.add_column("fact")
    table.add_column("value", overflow="fold")
    for key in (
        "vllm_version",
        "moe_backend",
        "moe_quant",
        "linear_kernels",
        "attention_backend",
        "cudagraph_mode",
        "kv_cache_tokens",
        "max_concurrency",
        "model_load_gib",
        "model_load_s",
        "graph_capture_s",
        "graph_capture_gib",
        "requested",
        "autotuner_skipped",
        "signatures",
    ):
        value = data[key]
        shown = (
            ", ".join(map(str, value))
            if isinstance(value, list)
            else json.dumps(value)
            if isinstance(value, dict)
            else value
        )
        table.add_row(key, Text("-" if shown in (None, "") else str(shown)))
    out.print(table)

    colour = {"pass": "green", "warn": "yellow", "fail": "red"}
    checks = Table(title="verdicts")
    for col in ("check", "status", "message"):
        checks.add_column(col, overflow="fold")
    for v in vs:
        # Text, not markup: log lines and messages are full of [brackets].
        checks.add_row(Text(v.check), Text(v.status, style=colour[v.status]), Text(v.message))
        for line in v.lines:
            checks.add_row("", "", Text(f"| {line}", style="dim"))
    out.print(checks)
    return 0
