"""`harness fingerprint LOG`: read a vLLM log and show what it proves."""

from __future__ import annotations

import json
from pathlib import Path

from rich.text import Text

from harness.console import out
from harness.errors import ConfigError
from harness.fingerprint.parse import fingerprint
from harness.fingerprint.verdicts import cause_of, verdicts
from harness.safety import numbers


def register(sub) -> None:
    p = sub.add_parser(
        "fingerprint",
        help="read a vLLM server log: selected kernels, KV cache, known failures",
        description="Exit codes: 0 every verdict passed (or warned), 1 a verdict failed, "
        "2 bad input (missing, empty, compressed or binary file).",
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
        type=numbers.arg("--max-autotuner-skips", int, lo=0, hi=1_000_000),
        default=0,
        help="skipped tactics allowed per op (default 0)",
    )
    p.add_argument(
        "--running",
        action="store_true",
        help="the server is still running: a log that stops during graph capture says nothing yet",
    )
    p.add_argument(
        "--hung",
        action="store_true",
        help="no new log line came for the quiet period while the server was not ready: a log "
        "that stops during graph capture is then a capture hang (a file alone is not)",
    )
    p.set_defaults(func=run)


# Compressed or binary files a user might pass by mistake, by their magic bytes.
_MAGIC = {
    b"\x1f\x8b": "gzip: run `gunzip` (or `zcat LOG > LOG.txt`) first",
    b"BZh": "bzip2: run `bunzip2` first",
    b"\xfd7zXZ": "xz: run `unxz` first",
    b"PK\x03\x04": "zip: unzip it first",
    b"\x28\xb5\x2f\xfd": "zstd: run `unzstd` first",
}


MAX_LOG_BYTES = 2 << 30  # a week of DEBUG logging; /dev/zero behind a symlink is not a log
# A log read whole takes several times its size in memory once split into lines: past this, the
# fingerprint reads the head (start-up: versions, kernels, KV cache, graph capture) and the tail
# (the end: a failure, a hang), and says so. The middle of a long log is request progress.
WHOLE_LOG_BYTES = 256 << 20
HEAD_BYTES = 64 << 20


def _head_and_tail(path: Path, size: int) -> bytes:
    from harness.console import err
    from harness.safety.paths import open_regular

    with open_regular(path, what="log") as f:
        head = f.read(HEAD_BYTES)
        f.seek(max(HEAD_BYTES, size - (WHOLE_LOG_BYTES - HEAD_BYTES)))
        tail = f.read(WHOLE_LOG_BYTES - HEAD_BYTES)
    head = head[: head.rfind(b"\n") + 1] or head  # whole lines on both sides of the cut
    tail = tail[tail.find(b"\n") + 1:] if b"\n" in tail else tail
    err.print(f"note: log {path} is {size / (1 << 20):.0f} MiB: its first {len(head) >> 20} MiB and last "
              f"{len(tail) >> 20} MiB are read, the {(size - len(head) - len(tail)) >> 20} MiB between are left out",
              markup=False)
    return head + tail


def read_log(path: Path) -> str:
    """The log's text; a missing, empty or binary file is a ConfigError naming it and the fix."""
    from harness.safety.paths import read_bytes, special

    if (kind := special(path)) is not None and kind != "a folder":
        raise ConfigError(f"cannot read log {path}: it is {kind}", hint="pass the path of a saved server log")
    try:
        if kind == "a folder":
            raise IsADirectoryError(path)
        if not path.exists():
            raise FileNotFoundError(2, "No such file or directory", str(path))
        size = path.stat().st_size
        if size > MAX_LOG_BYTES:
            raise ConfigError(f"log {path}: larger than {MAX_LOG_BYTES >> 30} GiB",
                              hint="this is not a server log: check the path")
        data = read_bytes(path, limit=MAX_LOG_BYTES, what="log") if size <= WHOLE_LOG_BYTES \
            else _head_and_tail(path, size)
    except IsADirectoryError as exc:
        raise ConfigError(
            f"cannot read log {path}: it is a directory", hint="pass the server log file inside it"
        ) from exc
    except OSError as exc:
        raise ConfigError(
            f"cannot read log {path}: {exc.strerror}", hint="pass the path of a saved server log"
        ) from exc
    if not data.strip():
        raise ConfigError(
            f"log {path} is empty",
            hint="save the server's output first (`docker logs NAME > vllm.log 2>&1`)",
        )
    for magic, fix in _MAGIC.items():
        if data.startswith(magic):
            raise ConfigError(f"log {path} is compressed ({fix.split(':')[0]})", hint=fix)
    head = data[:65536]
    text = head.decode("utf-8", errors="replace")
    # Text logs hold no NUL bytes and few undecodable ones; a binary file has both.
    if b"\x00" in head or text.count("\ufffd") > max(8, len(text) // 100):
        raise ConfigError(
            f"log {path} is not text (binary data)",
            hint="pass the vLLM server log as plain text (utf-8)",
        )
    return data.decode("utf-8", errors="replace")


def run(args) -> int:
    path = Path(args.log)
    text = read_log(path)
    fp = fingerprint(text, process_ended=not args.running, hung=args.hung)
    # Requests named on the command line win; otherwise judge against what the log says was asked
    # (the request reader sets all three, None where the log asked for nothing).
    vs = verdicts(
        fp,
        requested_moe=args.moe or fp.requested["moe_backend"],
        requested_linear=args.linear or fp.requested["linear_backend"],
        requested_attention=args.attention or fp.requested["attention_backend"],
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
        return _exit_code(vs)

    data = fp.to_json()
    from harness.tables import Col, show

    rows = []
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
        "linear_by_layer",
        "drafter_moe_backend",
        "drafter_linear_kernels",
        "drafter_attention_backend",
        "spec_method",
        "num_speculative_tokens",
        "spec_acceptance_rate",
        "spec_acceptance_per_position",
        "spec_mean_acceptance_length",
        "fatal",
        "failure_class",
        "failure_signature",
        "asked",
        "failure_phase",
        "failure_op",
        "root_cause",
        "root_cause_line",
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
        rows.append([Text(key), Text("-" if shown in (None, "") else str(shown))])
        if key == "fatal" and (cause := cause_of(fp)) is not None:
            # the cause in words with its evidence line ("cause not in this excerpt" when the
            # log does not hold it)
            rows.append([Text("cause"), Text(cause.sentence())])
    show(out, f"fingerprint of {path}", [Col("fact", whole=True), Col("value")], rows)

    colour = {"pass": "green", "warn": "yellow", "fail": "red"}
    vrows = []
    for v in vs:
        # Text, not markup: log lines and messages are full of [brackets].
        vrows.append([Text(v.check), Text(v.status, style=colour[v.status]), Text(v.message)])
        for line in v.lines:
            vrows.append([Text(""), Text(""), Text(f"| {line}", style="dim")])
    show(out, "verdicts", [Col("check", whole=True), Col("status"), Col("message")], vrows)
    return _exit_code(vs)


def _exit_code(vs) -> int:
    """1 when any verdict failed (a death, a refused or ignored request), else 0."""
    return 1 if any(v.status == "fail" for v in vs) else 0
