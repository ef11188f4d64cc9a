"""Values that reach a Dockerfile, a command line or a mount: one grammar per field.

Each value is checked whole with `re.fullmatch` (a pattern ending in `$` under `re.match`
accepts a final newline, and one newline in a Dockerfile value is a new instruction). No
grammar here admits a newline, a carriage return, a NUL, a quote, a `$` or a backtick, and none
lets a value start with '-' (a program would read it as an option).
"""

from __future__ import annotations

import re

from harness.errors import ConfigError

_SEGMENT = r"[A-Za-z0-9_+][A-Za-z0-9._+=,@-]{0,127}"
GRAMMARS: dict[str, tuple[re.Pattern[str], str]] = {
    "sha": (re.compile(r"[0-9a-f]{40}"), "a full 40-character lowercase hex commit SHA"),
    "sha256": (re.compile(r"[0-9a-f]{64}"), "64 lowercase hex characters"),
    "digest": (re.compile(r"sha256:[0-9a-f]{64}"), "'sha256:' and 64 lowercase hex characters"),
    "version": (re.compile(r"[0-9][0-9A-Za-z.+!_-]{0,63}"), "a release version such as '0.33.0'"),
    "tag": (re.compile(r"[\w][\w.-]{0,127}"), "an image tag such as '13.0.1-devel-ubuntu24.04'"),
    "name": (re.compile(r"[a-z0-9][a-z0-9._=,+-]{0,63}"), "a name of lowercase letters, digits and . _ = , + -"),
    # a file name that becomes part of a Dockerfile COPY line or a build-context path
    "file_name": (re.compile(_SEGMENT), "a file name of letters, digits and . _ + = , @ - (no '/', no spaces)"),
    # a relative path of such names (patch paths under patches_dir)
    "rel_path": (re.compile(rf"{_SEGMENT}(?:/{_SEGMENT})*"),
                 "a relative path of names made of letters, digits and . _ + = , @ - (no spaces, no '..')"),
    # the interpreter a RUN line calls: a bare command or an absolute path, nothing a shell expands
    "python": (re.compile(r"(?:python3(?:\.\d{1,2})?|/[A-Za-z0-9_.+/-]{1,255})"),
               "'python3', 'python3.12' or an absolute path such as /opt/venv/bin/python3"),
    "wheel_file": (re.compile(r"[A-Za-z0-9_.]+-[A-Za-z0-9_.!+]+(?:-[0-9][A-Za-z0-9_.]*)?-[A-Za-z0-9_.]+-"
                              r"[A-Za-z0-9_.]+-[A-Za-z0-9_.]+\.whl"), "a wheel file name (name-version-tags.whl)"),
    "part": (re.compile(r"part_\d{2,4}"), "a part name such as part_00"),
    "bundle_name": (re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}"),
                    "letters, digits and . _ + - (it becomes a file name)"),
}
_NEVER = re.compile(r"[\n\r\x00]")


def problem(field: str, value: object) -> str | None:
    """Why `value` is not a `field` value, or None."""
    pattern, what = GRAMMARS[field]
    if not isinstance(value, str):
        return f"{value!r} is not text ({what})"
    if _NEVER.search(value):
        return f"{value!r} holds a line break or NUL ({what})"
    if ".." in value.split("/") or not pattern.fullmatch(value):
        return f"{value!r} is not {what}"
    return None


def check(field: str, value: object, *, where: str, hint: str | None = None) -> str:
    """`value` when it fits the `field` grammar; otherwise a ConfigError naming `where`."""
    if (why := problem(field, value)) is not None:
        raise ConfigError(f"{where}: {why}", hint=hint or f"write {GRAMMARS[field][1]}")
    return value  # type: ignore[return-value]


def one_line(text: str) -> str:
    """`text` with every line break folded to a space, for a message that must not grow lines."""
    return " ".join(str(text).split()) if any(c in str(text) for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029") else str(text)


def http_url_problem(url: str, schemes: tuple[str, ...] = ("http", "https")) -> str | None:
    """Why `url` is not an http(s) URL with a host and a port in 1..65535 (a predicate: "is not
    ..."), or None."""
    from urllib.parse import urlsplit

    if not isinstance(url, str) or _NEVER.search(url) or any(c.isspace() for c in url):
        return "holds a space, a line break or a NUL"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range"
        return f"is not a URL ({exc})"
    if parts.scheme not in schemes or not parts.hostname:
        return "is not an http(s) URL" if schemes == ("http", "https") else f"is not a {'/'.join(schemes)} URL"
    if port is not None and not 1 <= port <= 65535 or parts.netloc.endswith(":"):
        return f"has port {port if port is not None else '(empty)'}, not one of 1..65535"
    return None


_FIELD = re.compile(r"\{[^{}]*\}|[{}]")


def url_template_problem(template: object, fields: tuple[str, ...] = ("name",)) -> str | None:
    """Why `template` is not an http(s) URL whose only braces are `{field}` for `fields`, or None.
    A template is never given to str.format: `{0}`, `{nope}`, `{name.__class__}` or a format
    width of a billion characters would each be an IndexError, a KeyError, an attribute read or
    a MemoryError there."""
    if not isinstance(template, str) or len(template) > 2000:
        return "is not a URL of at most 2000 characters"
    allowed = {f"{{{f}}}" for f in fields}
    for m in _FIELD.finditer(template):
        if m.group() not in allowed:
            return f"holds {m.group()[:40]!r}: the only field{'s are' if len(fields) > 1 else ' is'} " + \
                ", ".join(sorted(allowed))
    probe = template
    for f in fields:
        probe = probe.replace(f"{{{f}}}", "x")
    return http_url_problem(probe)


def fill_url(template: str, **values: str) -> str:
    """`template` with each `{field}` replaced by its value (a template url_template_problem passed)."""
    for k, v in values.items():
        template = template.replace(f"{{{k}}}", v)
    return template
