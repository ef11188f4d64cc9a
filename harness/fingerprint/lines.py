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
- whatever Docker or compose put in front: an RFC 3339 timestamp, `service  | `;
- nested process prefixes: the 0.10-era multiprocess wrapper inside EngineCore
  (`(EngineCore_0)(VllmWorker TP1 pid=1)`), Ray's `(RayWorkerWrapper pid=N, ip=A)` after vLLM's
  own `(EngineCore_DP0 pid=N) `, and Ray's de-duplication tail `[repeated 3x across cluster]`;
- torch.distributed's `[rank0]: ` in front of a worker's stderr;
- journald (`Dec 01 12:00:00 host vllm[123]: ...`, short and ISO forms), `kubectl logs --prefix`
  (`[pod/name/container] `), Docker's json-file records (`{"log": "...", "stream": ...}`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, Field, JsonValue

from harness.record import Scalar, kept

# SGR and other CSI sequences; tqdm also writes bare carriage returns between updates.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# `docker logs -t` and compose prefixes, before anything vLLM wrote.
# CI runners (Buildkite) write the same in brackets: "[2025-12-13T19:54:35Z] ".
_DOCKER_TS = re.compile(r"^(?:\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)\]"
                        r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d))\s+")
# journalctl's short and short-iso forms: "Dec 01 12:00:00 host unit[pid]: " (pid optional).
_JOURNALD = re.compile(
    r"^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?)"
    r" [\w.-]+ [\w@./:-]+(?:\[\d+\])?: "
)
_KUBECTL = re.compile(r"^\[pod/[^\]\s]+\]\s")
_COMPOSE = re.compile(r"^[\w.-]+\s+\|\s")
# Log viewers that export "2026-05-01 18:52:10.981 | line" (seen in a GB10 report); the pipe is
# required so FlashInfer's own "2026-05-03 18:41:37,368 - INFO - ..." lines keep their timestamp.
_VIEWER_TS = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?\s+\|\s?")
# A web log viewer's table copied as text (seen in a Qwen3-VL report): empty gutter cells, the
# viewer's own timestamp and a "host >>" marker before the line, its cell border after it:
# "  |   | 2025-11-04 10:08:01.174646 master-0 >> (EngineCore_DP0 pid=2933) ERROR ... |  "
_TABLE_CELL = re.compile(
    r"^(?:\|\s*)+(?:\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?\s+)?(?:[\w.-]+\s+>>\s+)?"
)
_TABLE_BORDER = re.compile(r"\s+\|\s*$")
_PROCESS = re.compile(
    r"^\((?P<proc>[^()]*?)\s*pid=(?P<pid>\d+)(?:,\s*ip=[\w.:]+)?(?:,[^()]*)?\)\s*"
)
# A prefix without a pid, `(EngineCore_0)`: stripped only when another prefix or a vLLM line
# follows, so a message that starts with a parenthesis keeps it.
# A reporter's paste that lost the opening parenthesis ("Worker_TP3_EP3 pid=18935) ERROR ...").
_PROCESS_CUT = re.compile(r"^(?P<proc>[A-Za-z][\w.-]*(?: [\w.-]+)?) pid=(?P<pid>\d+)\)\s*")
_PROCESS_BARE = re.compile(r"^\((?P<proc>[A-Za-z][\w.-]*(?: [\w.-]+)?)\)\s*")
_RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_VLLM = re.compile(
    r"^(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+"
    # the date is absent when a reporter trims it ("WARNING [envs.py:2057] ..."); a build with
    # its own date format writes "05-06-2026-09:53:02.367"
    r"(?:(?P<ts>\d\d-\d\d(?:-\d{4}-| )\d\d:\d\d:\d\d)(?:\.\d+)?\s+)?"
    # 0.6-0.7 wrote the file without the opening bracket: "INFO 01-30 03:18:12 worker.py:848] "
    r"(?:\[(?P<src>[^\]]+)\]|[\w.-]+:\d+\])\s?(?P<msg>.*)$"
)
# torch.distributed's per-rank prefix on a worker's stderr ("[rank0]: Traceback ...", 0.5-0.10
# era multi-GPU logs)
_TORCH_RANK = re.compile(r"^\[rank(?P<rank>\d+)\]:\s?")
# FlashInfer's logging.Formatter: "%(asctime)s - %(levelname)s - %(filename)s:%(lineno)d - %(name)s: %(message)s"
_FLASHINFER = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ - (?P<level>[A-Z]+) - (?P<src>\S+) - (?P<name>[\w.]+): (?P<msg>.*)$"
)


# A paste that lost its newlines runs vLLM lines together on one physical line ("... in __init__
# ERROR 11-04 18:02:56 [v1/executor/multiproc_executor.py:597] self.all_reduce(data) ERROR ..."):
# each embedded vLLM prefix after a space starts a line of its own. Only long lines are looked at.
_EMBEDDED_PREFIX = re.compile(r"(?<=\s)(?=(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d \[[^\]\s]+:\d+\] )")
_FLATTENED_MIN = 200
_SPACED_LEVELS = (" DEBUG ", " INFO ", " WARNING ", " ERROR ", " CRITICAL ")


@dataclass(frozen=True, slots=True)  # one per line of a long log
class LogLine:
    """One line of the log: its message part, and the line as written (colour removed)."""

    number: int
    message: str
    raw: str
    level: str | None = None
    process: str | None = None


# The same sequences as a terminal pastes them in caret notation ("^[[1;36m(APIServer pid=1)^[[0;0m"),
# seen in an Intel llm-scaler report.
_CARET_ANSI = re.compile(r"\^\[\[[0-9;]*m")


def strip_ansi(text: str) -> str:
    text = _ANSI.sub("", text)
    return _CARET_ANSI.sub("", text) if "^[[" in text else text


class _JsonRecord(BaseModel):
    """A JSON log record: vLLM's formatter (`message`, `levelname`, `processName`), another
    logger's `level`, or a wrapper's raw line (`log`, `msg`); a value of another type than the
    reader takes is read as absent."""

    message: JsonValue = None  # taken as text whatever it is
    levelname: Annotated[Scalar | None, kept(str, int, float, bool)] = None
    level: Annotated[Scalar | None, kept(str, int, float, bool)] = None
    process: Annotated[Scalar | None, kept(str, int, float, bool)] = Field(None, alias="processName")
    log: Annotated[str | None, kept(str)] = None
    msg: Annotated[str | None, kept(str)] = None


def _from_json(line: str) -> tuple[str, str | None, str | None, bool] | None:
    """(message, level, process, is_raw_line) of a JSON record; None if the line is not one.

    vLLM's JSON formatter writes `message`; Docker's json-file driver and log shippers wrap the
    whole raw line in `log` (or `msg`), which is then parsed again as a line."""
    if not line.startswith("{"):
        return None
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):  # a log line is data: nested too deep is just text
        return None
    if not isinstance(obj, dict):
        return None
    rec = _JsonRecord.model_validate(obj)
    process = str(rec.process) if rec.process else None
    if "message" in rec.model_fields_set:
        level = rec.levelname or rec.level
        return str(rec.message), str(level).upper() if level else None, process, False
    for raw in (rec.log, rec.msg):
        if raw is not None:
            return raw, None, process, True
    return None


def _strip_prefixes(line: str) -> tuple[str, str | None]:
    """Remove outer wrappers (Docker, compose, journald, kubectl) and every process prefix."""
    # Each wrapper is tried only when its first character can start it: most lines of a long
    # log start with "(" or a level name, and this runs once per line.
    head = line[:1]
    # "(" starts none of the wrappers (each needs a letter, a digit or "[pod/" first): the
    # process-prefixed lines that make up most of a long log skip them all.
    if head == "|" and line.startswith("| ["):  # a CI viewer's gutter: "  | [2025-03-10T15:07:20Z] ..."
        line, head = line[2:], "["
    elif head == "|" and (m := _TABLE_CELL.match(line)) and m.end() > 1:
        line = _TABLE_BORDER.sub("", line[m.end() :])
        head = line[:1]
    if head != "(":
        if head.isdigit() or line[3:4] == " ":
            line = _JOURNALD.sub("", line, count=1)
            head = line[:1]
        if head.isdigit() or (head == "[" and line[1:2].isdigit()):
            line = _VIEWER_TS.sub("", _DOCKER_TS.sub("", line, count=1), count=1)
        if line.find("|", 0, 120) != -1:
            line = _COMPOSE.sub("", line, count=1)
        if line.startswith("[pod/"):
            line = _KUBECTL.sub("", line, count=1)
    process = None
    if line.startswith("[rank") and (m := _TORCH_RANK.match(line)):
        process, line = f"rank{m.group('rank')}", line[m.end() :]
    for _ in range(8):  # nesting is 1-3 deep in practice; the bound keeps it linear
        if not line.startswith("("):
            if line.find(" pid=", 0, 60) != -1 and (m := _PROCESS_CUT.match(line)):
                process, line = m.group("proc"), line[m.end() :]
                continue
            break
        if m := _PROCESS.match(line):
            pass
        elif (m := _PROCESS_BARE.match(line)) and (
            line[m.end() :].startswith("(") or _VLLM.match(line[m.end() :])
        ):
            pass
        else:
            break
        # The innermost prefix names the process that wrote the line.
        process = m.group("proc") or process
        line = line[m.end() :]
    return line, process


def parse_line(number: int, raw: str) -> LogLine:
    line, process = _strip_prefixes((strip_ansi(raw) if "\x1b" in raw else raw).strip())
    # JSON records may still carry the multiprocess wrapper's "(EngineCore pid=N) " prefix.
    as_json = _from_json(line) if line.startswith("{") else None  # one call less per line
    if as_json is not None:
        message, level, json_process, is_raw = as_json
        if is_raw:
            inner = parse_line(number, message.rstrip("\n"))
            return LogLine(number, inner.message, raw, inner.level, inner.process or process)
        return LogLine(number, message.strip(), raw, level, json_process or process)
    if m := _VLLM.match(line):
        msg = m.group("msg")
        if "[repeated" in msg:
            msg = _RAY_REPEATED.sub("", msg)
        msg = msg.strip()
        return LogLine(number, msg, raw, m.group("level"), process)
    if m := _FLASHINFER.match(line):
        return LogLine(number, m.group("msg").strip(), raw, m.group("level"), process)
    if "[repeated" in line:
        line = _RAY_REPEATED.sub("", line)
    return LogLine(number, line.strip(), raw, None, process)


def split_lines(text: str) -> list[LogLine]:
    """Every non-empty line of `text`, carriage-return progress updates split apart. A JSON
    record whose message spans several lines (a traceback) gives one LogLine per line; a long
    physical line holding several vLLM lines run together gives one per vLLM line."""
    clean = strip_ansi(text).replace("\r\n", "\n").replace("\r", "\n")
    out: list[LogLine] = []
    for number, whole in enumerate(clean.split("\n"), start=1):
        if not whole or whole.isspace():  # `not raw.strip()` without copying the line
            continue
        if len(whole) < _FLATTENED_MIN:
            _append(out, number, whole)
            continue
        # (str.count first: most long lines are config dumps that hold no level word at all)
        if sum(whole.count(level) for level in _SPACED_LEVELS) < 2:
            _append(out, number, whole)
            continue
        cuts = [m.start() for m in _EMBEDDED_PREFIX.finditer(whole)]
        if len(cuts) < 2:  # one embedded prefix is a message quoting a log line, not a paste
            _append(out, number, whole)
            continue
        for start, end in zip([0, *cuts], [*cuts, len(whole)], strict=True):
            if not whole[start:end].isspace():
                _append(out, number, whole[start:end])
    return out


def _append(out: list[LogLine], number: int, raw: str) -> None:
    ln = parse_line(number, raw.rstrip())
    if "\n" in ln.message:
        for part in ln.message.split("\n"):
            if part.strip():
                out.append(LogLine(number, part.strip(), raw, ln.level, ln.process))
    else:
        out.append(ln)
