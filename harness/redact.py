"""Remove secrets before anything is written to a result, a log excerpt or a bug report.

A name is secret when it contains token, key, secret or password (any case), plus HF_TOKEN
always; values that look like Hugging Face tokens (`hf_` + 30 or more letters/digits) are
masked wherever they appear. The mask keeps the name so a reader knows the variable was set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MASK = "***"

# "tokens" and "tokenizer" are sizes and model paths, not secrets (--max-num-batched-tokens).
_SECRET_NAME = re.compile(r"token(?!s|izer)|key|secret|passw(?:or)?d", re.IGNORECASE)
_ALWAYS = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_TOKEN"})
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")
# NAME=VALUE (shell, env dumps, `-e NAME=VALUE`), NAME: VALUE (YAML), 'name': 'value' (dict repr).
_PAIR = re.compile(
    r"(?P<nq>['\"]?)(?P<name>\b[A-Za-z_][A-Za-z0-9_.-]*)(?P=nq)(?P<sep>\s*[=:]\s*)(?P<quote>['\"]?)(?P<value>[^\s'\",;]+)"
)
_FLAG_VALUE = re.compile(
    r"(?P<flag>--[A-Za-z0-9][A-Za-z0-9_.-]*)(?P<sep>\s+)(?P<value>[^\s-][^\s]*)"
)


def is_secret_name(name: str) -> bool:
    bare = name.lstrip("-").upper().replace("-", "_")
    return bare in _ALWAYS or bool(_SECRET_NAME.search(name))


def redact_env(mapping: Mapping[str, str]) -> dict[str, str]:
    """A copy of an environment with secret values masked (and hf_ tokens masked anywhere)."""
    return {
        k: MASK if is_secret_name(k) else _HF_TOKEN.sub(MASK, str(v)) for k, v in mapping.items()
    }


def redact_args(argv: list[str]) -> list[str]:
    """A copy of a command line: `--api-key X`, `--hf-token=X`, `-e HF_TOKEN=X` masked."""
    out: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        if arg.startswith("-") and "=" in arg:
            flag, _, _ = arg.partition("=")
            out.append(f"{flag}={MASK}" if is_secret_name(flag) else _HF_TOKEN.sub(MASK, arg))
            continue
        if arg.startswith("--") and is_secret_name(arg):
            out.append(arg)
            mask_next = True
            continue
        if "=" in arg and not arg.startswith("-"):
            name, _, _ = arg.partition("=")
            if is_secret_name(name):
                out.append(f"{name}={MASK}")
                continue
        out.append(_HF_TOKEN.sub(MASK, arg))
    return out


def redact_text(text: str) -> str:
    """Mask hf_ tokens, NAME=VALUE / NAME: VALUE pairs and `--flag value` with secret names."""

    def pair(m: re.Match[str]) -> str:
        if not is_secret_name(m.group("name")):
            return m.group(0)
        return f"{m.group('nq')}{m.group('name')}{m.group('nq')}{m.group('sep')}{m.group('quote')}{MASK}"

    def flag(m: re.Match[str]) -> str:
        if not is_secret_name(m.group("flag")):
            return m.group(0)
        return f"{m.group('flag')}{m.group('sep')}{MASK}"

    return _HF_TOKEN.sub(MASK, _FLAG_VALUE.sub(flag, _PAIR.sub(pair, text)))
