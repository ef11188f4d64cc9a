"""Turn raw vLLM log text into message lines, whatever the logging format was.

vLLM has printed the same messages under several wrappers; the fingerprint only cares about the
message. Formats read here (format strings from the PyPI sdists):
- 0.33.0 vllm/logger.py `_FORMAT`: `(%(vllm_process_name)s pid=%(process)d) %(levelname)s
  %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s`, date format `%m-%d %H:%M:%S`;
- 0.11.0: `%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s`, with a
  `(VllmWorker TP0 pid=N)` / `(EngineCore_0 pid=N)` prefix added by the multiprocess wrapper;
- `--logging-config.formatter json` (0.33.0 logging_utils/formatter.py JSON_FORMAT): one JSON
  object per line with `message`, `levelname`, `processName`, `process`;
- colour (logging_utils/formatter.py ColoredFormatter: ANSI SGR codes around every field);
- FlashInfer's own logger (`2026-05-16 17:30:20,721 - INFO - autotuner.py:1274 - flashinfer.jit:
  ...`) and tqdm progress bars, which carry no vLLM prefix at all;
- whatever Docker or compose put in front: an RFC 3339 timestamp, `service  | `.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# SGR and other CSI sequences; tqdm also writes bare carriage returns between updates.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# `docker logs -t` and compose prefixes, before anything vLLM wrote.
_DOCKER_TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z\s+")
_COMPOSE = re.compile(r"^[\w.-]+\s+\|\s")
# Log viewers that export "2026-05-01 18:52:10.981 | line" (seen in a GB10 report); the pipe is
# required so FlashInfer's own "2026-05-03 18:41:37,368 - INFO - ..." lines keep their timestamp.
_VIEWER_TS = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?\s+\|\s?")
_PROCESS = re.compile(r"^\((?P<proc>[^()]*?)\s*pid=(?P<pid>\d+)\)\s?")
_VLLM = re.compile(
    r"^(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+"
    r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)?\s+"
    r"\[(?P<src>[^\]]+)\]\s?(?P<msg>.*)$"
)
# FlashInfer's logging.Formatter: "%(asctime)s - %(levelname)s - %(filename)s:%(lineno)d - %(name)s: %(message)s"
_FLASHINFER = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ - (?P<level>[A-Z]+) - (?P<src>\S+) - (?P<name>[\w.]+): (?P<msg>.*)$"
)


@dataclass(frozen=True)
class LogLine:
    """One line of the log: its message part, and the line as written (colour removed)."""

    number: int
    message: str
    raw: str
    level: str | None = None
    process: str | None = None


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def _from_json(line: str) -> tuple[str, str | None, str | None] | None:
    if not line.startswith("{"):
        return None
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict) or "message" not in obj:
        return None
    process = obj.get("processName")
    return str(obj["message"]), obj.get("levelname"), str(process) if process else None


def parse_line(number: int, raw: str) -> LogLine:
    line = _COMPOSE.sub("", _VIEWER_TS.sub("", _DOCKER_TS.sub("", strip_ansi(raw).strip())))
    process = None
    if m := _PROCESS.match(line):
        process = m.group("proc") or None
        line = line[m.end() :]
    # JSON records may still carry the multiprocess wrapper's "(EngineCore pid=N) " prefix.
    as_json = _from_json(line)
    if as_json is not None:
        message, level, json_process = as_json
        return LogLine(number, message.strip(), raw, level, json_process or process)
    if m := _VLLM.match(line):
        return LogLine(number, m.group("msg").strip(), raw, m.group("level"), process)
    if m := _FLASHINFER.match(line):
        return LogLine(number, m.group("msg").strip(), raw, m.group("level"), process)
    return LogLine(number, line.strip(), raw, None, process)


def split_lines(text: str) -> list[LogLine]:
    """Every non-empty line of `text`, carriage-return progress updates split apart."""
    clean = strip_ansi(text).replace("\r\n", "\n").replace("\r", "\n")
    out: list[LogLine] = []
    for number, raw in enumerate(clean.split("\n"), start=1):
        if raw.strip():
            out.append(parse_line(number, raw.rstrip()))
    return out
