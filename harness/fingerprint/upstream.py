"""Log messages read from upstream source: every logger call of a vLLM (or FlashInfer) release,
with its format string turned into a template, kept when it reports what the fingerprint reads.

`extract(source, path)` is a pure function of one Python file's text (parsed with `ast`, never
regex); tools/vllm_log_catalog.py runs it over each release's sdist and commits the result in
tests/fixtures/upstream/, which tests/test_fingerprint_upstream.py checks against the tables.

Template: the message's literal text with `{0}`, `{1}`... where a value goes (literal braces
doubled, so `template.format(*values)` renders it); `fields[i]` is `"<conv>:<expression>"`, the
conversion (`s`, `r`, `d`, `.2f`, `,` ...) and the source expression of that value.

Relevance (the documented rule, `category()`): a message is kept when its literal text (the
template without placeholders, lower-cased) matches one of CATEGORIES' keyword regexes, tried in
order; fatal engine errors are kept only from the engine/executor/worker/entrypoint files and
only at ERROR or above (or raised). Everything else is dropped and counted by the script.
"""

from __future__ import annotations

import ast
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LOG_METHODS = frozenset({
    "debug", "info", "warning", "warn", "error", "exception", "critical", "fatal",
    "debug_once", "info_once", "warning_once", "error_once",
})
# Module-level helpers some releases log through (vllm.utils print_warning_once, 0.5-0.6).
PRINT_HELPERS = {"print_warning_once": "WARNING", "print_info_once": "INFO"}
LOGGER_NAMES = frozenset({"logger", "_logger", "log", "LOG", "LOGGER", "_LOGGER", "_log"})
_LEVEL = {
    "debug": "DEBUG", "debug_once": "DEBUG", "info": "INFO", "info_once": "INFO",
    "warning": "WARNING", "warn": "WARNING", "warning_once": "WARNING",
    "error": "ERROR", "error_once": "ERROR", "exception": "ERROR",
    "critical": "CRITICAL", "fatal": "CRITICAL",
}
_PERCENT = re.compile(
    r"%(?:\((?P<key>\w+)\))?(?P<flags>[-#0 +]*)(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d+))?[hlL]?"
    r"(?P<conv>[diouxXeEfFgGcrsa%])"
)

# (category, regex on the lower-cased literal text). Order matters: first match wins.
CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(rx))
    for name, rx in (
        ("autotuner", r"autotun|tactic"),
        ("spec-decode", r"specdecoding|speculative|acceptance (?:rate|length)|drafter|draft model"),
        ("kv-cache", r"kv cache size|maximum concurrency|cache blocks|num_gpu_blocks|gpu blocks"
                     r"|available kv cache memory|kv cache memory"),
        ("cuda-graph", r"cuda ?graph|cudagraph|graph captur"),
        ("attention", r"attention backend|attn backend|attention kernel|\bmla\b.*backend"),
        ("moe", r"\bmoe\b|experts"),
        ("linear", r"\bgemm\b|linear ?kernel|linear backend|linear layer|scaled_?mm|\bselected\b.* for "),
        ("quantization", r"quantization|quant method|\bnvfp4\b|\bmxfp4\b|\bfp4\b|\bfp8\b|\bawq\b"
                         r"|\bgptq\b|\bmarlin\b|\bint8\b|\bw4a\d"),
        ("kernel", r"\bkernel\b.*(?:using|select|fall)|(?:using|select|fall).*\b(?:kernel|backend)\b"),
    )
)
_FATAL = re.compile(
    r"died|dead|fatal|failed to start|initialization failed|unexpectedly|crash|terminat"
    r"|segfault|exit code|shutting down|not ready|hit an exception|background process"
)
_FATAL_PATHS = re.compile(r"(?:^|/)(?:engine|executor|worker|entrypoints|distributed)/")
_FATAL_LEVELS = frozenset({"ERROR", "CRITICAL", "RAISE"})


@dataclass(frozen=True)
class Message:
    template: str
    fields: tuple[str, ...]
    level: str  # DEBUG .. CRITICAL, or RAISE for a raised exception's message
    path: str
    line: int
    call: str  # `logger.info_once`, `raise RuntimeError`
    resolved: bool = True  # False: the message is a variable we could not read back

    @property
    def literal(self) -> str:
        """The message text with its placeholders removed (what the relevance rule reads)."""
        return re.sub(r"\{\d+\}", " ", self.template).replace("{{", "{").replace("}}", "}")


def category(msg: Message) -> str | None:
    """The category a message reports, or None when the relevance rule drops it."""
    text = msg.literal.lower()
    if msg.level in _FATAL_LEVELS and _FATAL_PATHS.search(msg.path) and _FATAL.search(text):
        return "fatal"
    if msg.level == "RAISE":
        return None  # raised messages count only as fatal engine errors
    for name, rx in CATEGORIES:
        if rx.search(text):
            return name
    return None


class _Template:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.fields: list[str] = []
        self.resolved = True

    def text(self, s: str) -> None:
        self.parts.append(s.replace("{", "{{").replace("}", "}}"))

    def field(self, conv: str, expr: ast.AST | str) -> None:
        src = expr if isinstance(expr, str) else _unparse(expr)
        self.parts.append("{" + str(len(self.fields)) + "}")
        self.fields.append(f"{conv}:{src}")


def _unparse(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 80 else text[:77] + "..."


def _percent(t: _Template, fmt: str, args: Sequence[ast.AST]) -> None:
    pos = 0
    named: dict[str, ast.AST] = {}
    if len(args) == 1 and isinstance(args[0], ast.Dict):
        named = {k.value: v for k, v in zip(args[0].keys, args[0].values, strict=False)
                 if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    it = iter(args)
    for m in _PERCENT.finditer(fmt):
        t.text(fmt[pos : m.start()])
        pos = m.end()
        conv = m.group("conv")
        if conv == "%":
            t.text("%")
            continue
        spec = (m.group("flags") or "") + ("." + m.group("prec") if m.group("prec") else "")
        spec = spec.replace("-", "<") if spec.startswith("-") else spec
        if m.group("key"):
            t.field(spec + conv, named.get(m.group("key"), m.group("key")))
        else:
            arg = next(it, None)
            t.field(spec + conv, arg if arg is not None else "?")
    t.text(fmt[pos:])


def _braces(t: _Template, fmt: str, args: list[ast.AST], kwargs: dict[str, ast.AST]) -> None:
    auto = 0
    try:
        parsed = list(string.Formatter().parse(fmt))
    except ValueError:
        t.text(fmt)
        return
    for literal, name, spec, conv in parsed:
        t.text(literal)
        if name is None:
            continue
        key = name.split(".")[0].split("[")[0]
        if key == "":
            expr: ast.AST | str = args[auto] if auto < len(args) else "?"
            auto += 1
        elif key.isdigit():
            expr = args[int(key)] if int(key) < len(args) else "?"
        else:
            expr = kwargs.get(key, key)
        t.field(("r" if conv == "r" else "") + (spec or ("s" if conv != "r" else "")), expr)


# ast.FormattedValue.conversion, every value it takes: none (-1), !s, !r, !a
_CONVERSION = {-1: "", ord("s"): "", ord("r"): "r", ord("a"): "a"}


def _build(t: _Template, node: ast.AST, env: Mapping[str, ast.AST], depth: int = 0) -> None:
    """Append the message `node` evaluates to: literals, f-strings, `%`, `.format`, `+`."""
    if depth > 8:
        t.field("s", node)
        t.resolved = False
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        t.text(node.value)
    elif isinstance(node, ast.JoinedStr):
        for v in node.values:
            if isinstance(v, ast.Constant):
                t.text(str(v.value))
            elif isinstance(v, ast.FormattedValue):
                spec = ""
                if isinstance(v.format_spec, ast.JoinedStr):  # what ast makes of a format spec
                    spec = "".join(
                        str(p.value) if isinstance(p, ast.Constant) else "*"
                        for p in v.format_spec.values
                    )
                conv = _CONVERSION[v.conversion]
                t.field((conv + spec) or "s", v.value)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        _build(t, node.left, env, depth + 1)
        _build(t, node.right, env, depth + 1)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _is_str(node.left, env):
        fmt = _literal(node.left, env)
        args = list(node.right.elts) if isinstance(node.right, ast.Tuple) else [node.right]
        _percent(t, fmt, args) if fmt is not None else t.field("s", node)
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and (fmt := _literal(node.func.value, env)) is not None
    ):
        _braces(t, fmt, list(node.args), {k.arg: k.value for k in node.keywords if k.arg})
    elif isinstance(node, ast.Name) and node.id in env:
        _build(t, env[node.id], {k: v for k, v in env.items() if k != node.id}, depth + 1)
    else:
        t.field("s", node)
        t.resolved = False


def _literal(node: ast.AST, env: Mapping[str, ast.AST]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and isinstance(bound := env.get(node.id), ast.Constant):
        value = bound.value
        return value if isinstance(value, str) else None
    return None


def _is_str(node: ast.AST, env: Mapping[str, ast.AST]) -> bool:
    return _literal(node, env) is not None


def _logger_names(tree: ast.Module) -> set[str]:
    names = set(LOGGER_NAMES)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            f = node.value.func
            fname = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if fname in ("init_logger", "getLogger", "get_logger"):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _receiver(func: ast.Attribute) -> str | None:
    v = func.value
    if isinstance(v, ast.Name):
        return v.id
    if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id in ("self", "cls"):
        return v.attr
    return None


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: str, loggers: set[str]) -> None:
        self.path = path
        self.loggers = loggers
        self.out: list[Message] = []
        self.envs: list[dict[str, ast.expr]] = [{}]

    def _scope(self, node: ast.AST) -> None:
        self.envs.append({})
        self.generic_visit(node)
        self.envs.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _scope  # noqa: N815 - ast.NodeVisitor names

    def visit_Assign(self, node: ast.Assign) -> None:
        # `msg = "..."` then `logger.warning(msg)`: remember the last string-ish value per name
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if isinstance(node.value, (ast.Constant, ast.JoinedStr, ast.BinOp, ast.Call)):
                self.envs[-1][node.targets[0].id] = node.value
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        target = node.target
        if isinstance(target, ast.Name) and isinstance(node.op, ast.Add) and target.id in self.envs[-1]:
            self.envs[-1][target.id] = ast.BinOp(self.envs[-1][target.id], ast.Add(), node.value)
        self.generic_visit(node)

    def _emit(self, first: ast.AST, rest: list[ast.AST], level: str, call: str, line: int) -> None:
        t = _Template()
        env = self.envs[-1]
        fmt = _literal(first, env)
        if fmt is not None and rest and level != "RAISE":
            _percent(t, fmt, rest)
        else:
            _build(t, first, env)
        self.out.append(Message("".join(t.parts), tuple(t.fields), level, self.path, line, call,
                                t.resolved))

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if node.args and isinstance(f, ast.Attribute) and f.attr in LOG_METHODS:
            who = _receiver(f)
            if who in self.loggers:
                self._emit(node.args[0], list(node.args[1:]), _LEVEL[f.attr], f"{who}.{f.attr}",
                           node.lineno)
        elif node.args and isinstance(f, ast.Name) and f.id in PRINT_HELPERS:
            self._emit(node.args[0], list(node.args[1:]), PRINT_HELPERS[f.id], f.id, node.lineno)
        self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc
        if isinstance(exc, ast.Call) and exc.args and isinstance(exc.func, (ast.Name, ast.Attribute)):
            name = exc.func.id if isinstance(exc.func, ast.Name) else exc.func.attr
            if name[:1].isupper():
                self._emit(exc.args[0], [], "RAISE", f"raise {name}", node.lineno)
        self.generic_visit(node)


def extract(source: str, path: str) -> list[Message]:
    """Every logger call (and raised exception message) of one Python file, in source order.
    A file that does not parse gives nothing (the script counts it)."""
    tree = ast.parse(source, filename=path)
    v = _Visitor(path, _logger_names(tree))
    v.visit(tree)
    return v.out
