"""The messages a C++ / CUDA source file can put in a vLLM log, for tools/vllm_log_catalog.py.

The C++ side of vLLM (`csrc/`) and FlashInfer (`csrc/`, `include/`) reaches the log in two ways:
raised, as a Python exception whose text is the C++ message (a failed TORCH_CHECK is
`RuntimeError: {message}`), or printed to stdout/stderr (`printf`, `fprintf`). This module finds
every such message with a small lexer (comments and string literals are read as C++ reads them;
the arguments of a call are split at top-level commas), and turns it into a template like the
Python catalog's: literal text kept, each other argument written `{0}`, `{1}`... and listed in
`fields` as its source expression.

Read (the macro definitions are in each tree's own headers, c10/util/Exception.h for torch's):
- `TORCH_CHECK(cond, args...)` (c10::str of the args; no args: "Expected {cond} to be true, but got
  false."), `TORCH_CHECK_NOT_IMPLEMENTED` (NotImplementedError), `TORCH_CHECK_VALUE` (ValueError),
  `TORCH_CHECK_TYPE` (TypeError), `TORCH_CHECK_INDEX` (IndexError), `TORCH_INTERNAL_ASSERT`;
  `TORCH_CHECK_EQ/NE/LT/LE/GT/GE(a, b)` ("Check failed: a == b");
- FlashInfer: `FLASHINFER_CHECK(cond, args...)`, `FLASHINFER_ERROR(args...)` (std::ostringstream
  of the args), `TVM_FFI_THROW(Kind) << ...;` and `TVM_FFI_ICHECK*(...) << ...;` (0.4+),
  `TLLM_CHECK_WITH_INFO(cond, fmt, args...)`, `TLLM_THROW(fmt, args...)` (printf formats,
  "[TensorRT-LLM][ERROR] ..."), `TLLM_CHECK(cond)` ("Assertion failed: cond");
- `throw X(expr)` with `expr` a literal, a `+` chain, or a c10::str / std::string call;
- `printf(fmt, ...)`, `fprintf(stream, fmt, ...)` (`%d`, `%s`... become fields).

A device-side `printf` in a kernel is kept too: a kernel that prints before a trap writes to the
log the same way. What a macro's arguments compute (a name built at run time) is a field; a
message with no literal text at all is dropped (nothing to read).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass

SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp", ".cxx", ".inl")

# name -> (how it reaches the log, the exception type, where its message starts)
#   kind "raise": the message becomes an exception; "print": a line written as is
#   message: "args" every argument after the condition (c10::str), "all" every argument,
#   "format" a printf format and its arguments after the condition, "format0" the same with no
#   condition, "cond" the condition text only, "binary" two operands, "stream" what `<<` adds
CALLS: dict[str, tuple[str, str, str]] = {
    "TORCH_CHECK": ("raise", "RuntimeError", "args"),
    "TORCH_CHECK_MSG": ("raise", "RuntimeError", "args"),
    "TORCH_CHECK_NOT_IMPLEMENTED": ("raise", "NotImplementedError", "args"),
    "TORCH_CHECK_VALUE": ("raise", "ValueError", "args"),
    "TORCH_CHECK_TYPE": ("raise", "TypeError", "args"),
    "TORCH_CHECK_INDEX": ("raise", "IndexError", "args"),
    "TORCH_CHECK_LINALG": ("raise", "RuntimeError", "args"),
    "TORCH_INTERNAL_ASSERT": ("raise", "RuntimeError", "args"),
    "TORCH_CHECK_EQ": ("raise", "RuntimeError", "binary:=="),
    "TORCH_CHECK_NE": ("raise", "RuntimeError", "binary:!="),
    "TORCH_CHECK_LT": ("raise", "RuntimeError", "binary:<"),
    "TORCH_CHECK_LE": ("raise", "RuntimeError", "binary:<="),
    "TORCH_CHECK_GT": ("raise", "RuntimeError", "binary:>"),
    "TORCH_CHECK_GE": ("raise", "RuntimeError", "binary:>="),
    "FLASHINFER_CHECK": ("raise", "RuntimeError", "args"),
    "FLASHINFER_ERROR": ("raise", "RuntimeError", "all"),
    "TLLM_CHECK_WITH_INFO": ("raise", "RuntimeError", "format"),
    "TLLM_THROW": ("raise", "RuntimeError", "format0"),
    "TLLM_CHECK": ("raise", "RuntimeError", "cond"),
    "TVM_FFI_THROW": ("raise", "", "stream"),
    "TVM_FFI_ICHECK": ("raise", "RuntimeError", "stream"),
    "TVM_FFI_CHECK": ("raise", "RuntimeError", "kindstream"),
    "printf": ("print", "", "format0"),
    "fprintf": ("print", "", "fformat"),
}
_CALL = re.compile(r"(?P<name>(?:TORCH_|FLASHINFER_|TLLM_|TVM_FFI_|f?printf)\w*)\s*\(")
_STARTS = ("TORCH_", "FLASHINFER_", "TLLM_", "TVM_FFI_", "printf", "fprintf")
_THROW = re.compile(r"throw\s+(?:new\s+)?(?P<type>(?:\w+::)*\w+)\s*(?:<[^;(){}]*>)?\s*[({]")
_FORMAT = re.compile(r"%(?:%|[-+ #0]*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|L|z|j|t)?[diouxXeEfFgGaAcspn]"
                     r"|[-+ #0]*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|L|z|j|t)?\"\s*PRI\w+\s*\")")
_ICHECK_BINARY = {"TVM_FFI_ICHECK_EQ": "==", "TVM_FFI_ICHECK_NE": "!=", "TVM_FFI_ICHECK_LT": "<",
                  "TVM_FFI_ICHECK_LE": "<=", "TVM_FFI_ICHECK_GT": ">", "TVM_FFI_ICHECK_GE": ">="}
_TVM_KINDS = {"ValueError", "TypeError", "IndexError", "RuntimeError", "NotImplementedError",
              "AttributeError", "KeyError", "InternalError"}


_ICHECK_CMP = re.compile(r"(TVM_FFI_ICHECK_(?:EQ|NE|LT|LE|GT|GE))\s*\(")


def _matches(code: str, rx: re.Pattern[str], starts: tuple[str, ...]) -> list[re.Match[str]]:
    """`rx` matched at each word start where one of the literals `starts` occurs (str.find
    speed: generated FlashInfer bindings are megabytes of code)."""
    found = []
    for lit in starts:
        pos = code.find(lit)
        while pos != -1:
            if (pos == 0 or not (code[pos - 1].isalnum() or code[pos - 1] == "_")) and (m := rx.match(code, pos)):
                found.append(m)
            pos = code.find(lit, pos + 1)
    found.sort(key=lambda m: m.start())
    return [m for k, m in enumerate(found) if k == 0 or m.start() != found[k - 1].start()]


@dataclass(frozen=True)
class CppMessage:
    kind: str  # "raise" | "print"
    exception: str  # the Python type a raise reaches the log as ("" for a print)
    template: str
    fields: tuple[str, ...]
    call: str
    path: str
    line: int

    @property
    def literal(self) -> str:
        return re.sub(r"\{\d+\}", "", self.template)


_TOKENS = re.compile(
    r'//[^\n]*|/\*.*?(?:\*/|\Z)|R"(?P<delim>[^(\s"]{0,16})\(.*?\)(?P=delim)"'
    r'|"(?:\\.|[^"\\\n])*"?|\'(?:\\.|[^\'\\\n])*\'?',
    re.S,
)


def _strip_comments(src: str) -> str:
    """Comments blanked to spaces (newlines kept, so offsets map to the same lines); string and
    character literals left as they are."""

    def blank(m: re.Match[str]) -> str:
        t = m.group(0)
        return re.sub(r"[^\n]", " ", t) if t.startswith("/") else t

    return _TOKENS.sub(blank, src)


def _end_of_literal(src: str, i: int) -> int:
    quote, j = src[i], i + 1
    while j < len(src):
        if src[j] == "\\":
            j += 2
            continue
        if src[j] == quote or src[j] == "\n":
            return j + 1
        j += 1
    return j


def _code(src: str, i: int):
    """(offset, character) of `src` from `i` on, string and character literals stepped over
    whole: what the scanners below count brackets and separators in."""
    while i < len(src):
        if src[i] in "\"'":
            i = _end_of_literal(src, i)
            continue
        yield i, src[i]
        i += 1


def _args(src: str, open_paren: int) -> tuple[list[str], int] | None:
    """The top-level comma-separated arguments of the call whose `(` is at open_paren, and the
    offset after its `)`; None when the parentheses never close (a macro definition's tail)."""
    depth, start, out = 0, open_paren + 1, []
    for i, c in _code(src, open_paren):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                out.append(src[start:i].strip())
                return [a for a in out if a], i + 1
        elif c == "," and depth == 1:
            out.append(src[start:i].strip())
            start = i + 1
    return None


_LITERAL = re.compile(r'(?:u8|u|U|L)?"((?:[^"\\\n]|\\.)*)"')
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'", "r": "", "0": ""}


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), text)


def _literal_only(expr: str) -> str | None:
    """The text of `expr` when it is nothing but adjacent string literals (maybe wrapped in
    std::string(...) or parentheses); None otherwise."""
    e = expr.strip()
    while True:
        m = re.fullmatch(r"(?:std::string|std::string_view|c10::str|\w+::str)?\s*\((.*)\)", e, re.S)
        if not m or _args(e, e.index("(")) is None or len(_args(e, e.index("("))[0]) != 1:  # type: ignore[index]
            break
        e = m.group(1).strip()
    pos, parts = 0, []
    for m in _LITERAL.finditer(e):
        if e[pos : m.start()].strip():
            return None
        parts.append(_unescape(m.group(1)))
        pos = m.end()
    if not parts or e[pos:].strip():
        return None
    return "".join(parts)


def _split_plus(expr: str) -> list[str]:
    """`a + "b" + c` at top level."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(expr):
        c = expr[i]
        if c in "\"'":
            i = _end_of_literal(expr, i)
            continue
        if c in "([{<":
            depth += c != "<"
        elif c in ")]}":
            depth -= 1
        elif c == "+" and depth == 0 and expr[i + 1 : i + 2] != "+" and expr[i - 1 : i] != "+":
            parts.append(expr[start:i])
            start = i + 1
        i += 1
    parts.append(expr[start:])
    return [p.strip() for p in parts if p.strip()]


class _Builder:
    def __init__(self) -> None:
        self.text: list[str] = []
        self.fields: list[str] = []

    def lit(self, s: str) -> None:
        self.text.append(s.replace("{", "{{").replace("}", "}}"))

    def field(self, expr: str) -> None:
        self.text.append(f"{{{len(self.fields)}}}")
        self.fields.append(" ".join(expr.split())[:120])

    def expr(self, e: str) -> None:
        """Literal text where `e` is literal; a `+` chain piece by piece; else one field."""
        if (t := _literal_only(e)) is not None:
            self.lit(t)
            return
        pieces = _split_plus(e)
        if len(pieces) > 1:
            for p in pieces:
                self.expr(p)
            return
        self.field(e)

    def format(self, fmt_expr: str, args: list[str]) -> None:
        fmt = _literal_only(fmt_expr)
        if fmt is None:
            self.expr(fmt_expr)
            for a in args:
                self.field(a)
            return
        pos, k = 0, 0
        for m in _FORMAT.finditer(fmt):
            self.lit(fmt[pos : m.start()])
            if m.group(0) == "%%":
                self.lit("%")
            else:
                self.field(args[k] if k < len(args) else "?")
                k += 1
            pos = m.end()
        self.lit(fmt[pos:])

    def template(self) -> str:
        return " ".join("".join(self.text).split())


def _stream(src: str, after: int) -> tuple[list[str], int]:
    """The operands of `<< a << "b" << c` that follow offset `after`, up to the statement's `;`."""
    end, depth = len(src), 0
    for i, c in _code(src, after):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                end = i
                break
            depth -= 1
        elif c == ";" and depth == 0:
            end = i
            break
    body = src[after:end]
    if not body.lstrip().startswith("<<"):
        return [], end
    ops, depth, start = [], 0, 0
    for i, c in _code(body, 0):
        if i < start:
            continue  # the second `<` of an operator just taken
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif body.startswith("<<", i) and depth == 0:
            ops.append(body[start:i])
            start = i + 2
    ops.append(body[start:])
    return [o.strip() for o in ops[1:] if o.strip()], end


def extract(src: str, path: str) -> list[CppMessage]:
    """Every raised or printed message of one C++/CUDA source file."""
    code = _strip_comments(src)
    out: list[CppMessage] = []

    newlines = [m.start() for m in re.finditer("\n", code)]

    def line_of(pos: int) -> int:
        return bisect_left(newlines, pos) + 1

    def add(kind: str, exc: str, b: _Builder, call: str, pos: int) -> None:
        template = b.template()
        if re.sub(r"\{\d+\}", "", template).strip(" .:,;-\n"):
            out.append(CppMessage(kind, exc, template, tuple(b.fields), call, path, line_of(pos)))

    for m in _matches(code, _CALL, _STARTS):
        name = m.group("name")
        if name not in CALLS:
            continue
        if re.search(r"#\s*define\s+\w*\s*$", code[max(0, m.start() - 80) : m.start()]):
            continue  # the macro's own definition
        got = _args(code, m.end() - 1)
        if got is None:
            continue
        args, end = got
        kind, exc, how = CALLS[name]
        b = _Builder()
        if name.startswith("FLASHINFER_"):
            # flashinfer::Error::what(): "Error in function '{func}' at {file}:{line}: {message}"
            b.lit("Error in function '")
            b.field("__FUNCTION__")
            b.lit("' at ")
            b.field("__FILE__:__LINE__")
            b.lit(": ")
        if how == "args":
            if len(args) >= 2:
                for a in args[1:]:
                    b.expr(a)
            elif args:
                b.lit("Expected " + " ".join(args[0].split()) + " to be true, but got false.")
        elif how == "all":
            for a in args:
                b.expr(a)
        elif how.startswith("binary:") and len(args) >= 2:
            b.lit(f"Check failed: {' '.join(args[0].split())} {how[7:]} {' '.join(args[1].split())}")
            for a in args[2:]:
                b.expr(a)
        elif how == "cond" and args:
            b.lit("[TensorRT-LLM][ERROR] Assertion failed: " + " ".join(args[0].split()))
        elif how == "format" and len(args) >= 2:
            b.lit("[TensorRT-LLM][ERROR] Assertion failed: ")
            b.format(args[1], args[2:])
        elif how == "format0" and args:
            if name == "TLLM_THROW":
                b.lit("[TensorRT-LLM][ERROR] ")
            b.format(args[0], args[1:])
        elif how == "fformat" and len(args) >= 2:
            b.format(args[1], args[2:])
        elif how == "kindstream" and len(args) >= 2:
            # tvm-ffi: TVM_FFI_CHECK(cond, Kind) << ... is TVM_FFI_THROW(Kind) << "Check failed: ("
            # #cond ") is false: " << ...
            exc = args[1] if args[1] in _TVM_KINDS else "RuntimeError"
            b.lit("Check failed: (" + " ".join(args[0].split()) + ") is false: ")
            for o in _stream(code, end)[0]:
                b.expr(o)
        elif how == "stream":
            ops, _ = _stream(code, end)
            if name == "TVM_FFI_THROW":
                exc = args[0] if args and args[0] in _TVM_KINDS else "RuntimeError"
            elif args:
                b.lit("Check failed: (" + " ".join(args[0].split()) + ") is false: ")
            for o in ops:
                b.expr(o)
        add(kind, exc, b, name, m.start())
    for m in _matches(code, _ICHECK_CMP, ("TVM_FFI_ICHECK_",)):
        got = _args(code, m.end() - 1)
        if got is None or len(got[0]) < 2:
            continue
        args, end = got
        b = _Builder()
        b.lit(f"Check failed: {' '.join(args[0].split())} {_ICHECK_BINARY[m.group(1)]} {' '.join(args[1].split())}: ")
        for o in _stream(code, end)[0]:
            b.expr(o)
        add("raise", "RuntimeError", b, m.group(1), m.start())
    for m in _matches(code, _THROW, ("throw",)):
        got = _args(code, m.end() - 1) if code[m.end() - 1] == "(" else None
        if got is None or not got[0]:
            continue
        b = _Builder()
        for a in got[0]:
            b.expr(a)
        typ = m.group("type").split("::")[-1]
        exc = {"invalid_argument": "ValueError", "out_of_range": "IndexError",
               "NotImplementedError": "NotImplementedError"}.get(typ, "RuntimeError")
        add("raise", exc, b, f"throw {m.group('type')}", m.start())
    out.sort(key=lambda x: x.line)
    return out
