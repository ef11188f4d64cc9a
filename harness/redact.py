"""Remove secrets before anything is written to a result, a log excerpt or a bug report.

A name is secret when one of its words (split at _ - . and camelCase) is token, key, secret,
password, passwd, credential, auth, authorization, private, session or cookie, or its last word
is pass (HF_TOKEN, api_key, X-Api-Key, apiKey,
AWS_SECRET_ACCESS_KEY), unless it is a count or size of them (max_tokens, token_ids,
tokenizer: those words differ). A secret name's value is masked in every form a log or a
command writes it: `NAME=v`, `NAME: v`, `'name': 'v'`, `'name': ['v1', 'v2']` (vLLM's
non-default args), `--name v`, `--name=v`. `Authorization: Bearer v`, credentials in URLs and
values shaped like well-known tokens (hf_, sk-, ghp_, github_pat_, glpat-, xox?-, AKIA, JWTs)
are masked wherever they appear. The mask keeps the name, so a reader knows it was set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MASK = "***"

_SECRET_WORDS = frozenset({
    "token", "key", "secret", "secrets", "password", "passwd", "pwd", "passphrase", "credential",
    "credentials", "auth", "authorization", "apikey", "cookie", "cookies", "private", "privatekey",
    "session", "sessionid", "sessiontoken", "pat",
})
# words that make a name secret only at its end: DB_PASS, SMTP_PASS (vLLM's pass_config is not one)
_SECRET_LAST = frozenset({"pass", "pw", "pswd"})
# words glued without a separator: HFTOKEN, apikey, accesstoken
_SECRET_ENDINGS = ("token", "apikey", "secret", "password", "passwd", "cookie", "credential", "credentials")
# a last word that makes the name a count, size or path of secrets, not one
_NOT_SECRET_TAIL = frozenset({
    "ids", "id", "count", "counts", "len", "length", "size", "sizes", "limit", "limits", "budget",
    "num", "number", "type", "types", "mode", "dim", "index", "idx", "file", "path", "dir", "env", "name",
})
_ALWAYS = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_TOKEN", "HUGGINGFACEHUB_API_TOKEN"})
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
# values that are secrets by their shape, whatever name (or none) they come with
_TOKEN_SHAPES = re.compile(
    r"\bhf_[A-Za-z0-9]{30,}\b"
    r"|\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}\b"
    r"|\bgithub_pat_[A-Za-z0-9_]{30,}"
    r"|\bglpat-[A-Za-z0-9_-]{20,}"
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"
)
_HF_TOKEN = _TOKEN_SHAPES  # the old name, for callers that imported it
# Authorization: Bearer v / Basic v / v, as a header line, a dict entry or a curl -H argument
_AUTH = re.compile(
    r"(?i)(?P<head>\b(?:proxy-)?authorization\\?['\"]?\s*[:=]\s*\\?['\"]?)"
    r"(?:(?P<scheme>bearer|basic|token|digest|apikey)\s+)?(?P<cred>[^\s'\",}\\]+)"
)
_BEARER = re.compile(r"(?i)\b(?P<scheme>bearer)\s+(?P<cred>[A-Za-z0-9._~+/=-]{8,})")
_URL_CREDS = re.compile(r"(?P<pre>[a-z][a-z0-9+.-]{0,15}://[^\s:/@'\"]*:)(?P<cred>[^\s/@'\"]+)(?P<at>@)", re.I)
# ?access_token=v, &token=v, ;sessionid=v in a URL's query or parameters
_URL_PARAM = re.compile(r"(?P<pre>[?&;](?P<name>[A-Za-z0-9_.%-]{1,64})=)(?P<value>[^&#;,)\s'\"<>]+)")
# (schemes are short: a bounded scheme keeps each search linear without a word boundary, which
# "1http://u:p@h" would not have)
# a token alone as the user of a URL (https://<token>@github.com/...): long, with a digit
_URL_TOKEN_USER = re.compile(r"(?P<pre>[a-z][a-z0-9+.-]{0,15}://)(?P<cred>(?=[^\s:/@'\"]*\d)[^\s:/@'\"]{16,})(?P<at>@)", re.I)
# NAME=VALUE, NAME: VALUE, 'name': value, "name": value, \"name\": value; the value quoted,
# a [list], a (tuple) or bare. (vLLM FrontendArgs, vllm/entrypoints/openai/cli_args.py, has
# `api_key: list[str] | None`: its "non-default args" log line prints the keys as a list.)
_PAIR = re.compile(
    r"(?P<nq>\\?['\"]?)(?P<name>\b[A-Za-z_][A-Za-z0-9_.-]*)(?P=nq)(?P<sep>\s*[=:]\s*)"
    r"(?P<value>\\\"[^\"\n]*?\\\"|'[^'\n]*'|\"[^\"\n]*\"|\[[^\]\n]*\]|\([^)\n]*\)|[^\s'\",;&)}\]]+)"
)
# names are bounded (128): an unbounded one made every search quadratic on `a.a.a.a...`
_PAIR_HEAD = re.compile(r"(?P<nq>\\?['\"]?)(?P<name>\b[A-Za-z_][A-Za-z0-9_.-]{0,127})(?P=nq)(?P<sep>\s*[=:]\s*)")
_PAIR_VALUE = re.compile(_PAIR.pattern[_PAIR.pattern.index("(?P<value>"):])
_FLAG_VALUE = re.compile(
    r"(?P<flag>--[A-Za-z0-9][A-Za-z0-9_.-]{0,127})(?P<sep>\s+)(?P<value>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"-][^\s]*)"
)
_EMPTY = frozenset({"None", "null", "''", '""', "[]", "()", "false", "False", "\\\"\\\""})


def is_secret_name(name: str) -> bool:
    bare = name.lstrip("-")
    if bare.upper().replace("-", "_") in _ALWAYS:
        return True
    words = [w.lower() for part in re.split(r"[^A-Za-z0-9]+", bare) for w in _WORD.findall(part)]
    if not words or words[-1] in _NOT_SECRET_TAIL:
        return False
    return words[-1] in _SECRET_LAST or any(w in _SECRET_WORDS or w.endswith(_SECRET_ENDINGS) for w in words)


def _mask_value(value: str) -> str:
    if value in _EMPTY:
        return value  # "not set" is worth seeing, and hides nothing
    if value[:2] == '\\"':
        return f'\\"{MASK}\\"'
    if value[:1] in "'\"":
        return f"{value[0]}{MASK}{value[0]}"
    return MASK


def redact_text(text: str) -> str:
    """Every secret form above masked in free text (logs, messages, reports, JSON dumps)."""

    def auth(m: re.Match[str]) -> str:
        scheme = f"{m['scheme']} " if m["scheme"] else ""
        return f"{m['head']}{scheme}{MASK}"

    def pairs(text: str) -> str:
        # Every `NAME=` / `NAME:` head is looked at, also inside another name's value
        # (`A:DB_PASS: x`); only a secret name's value is consumed, so each character is read
        # a bounded number of times (a rescan per head would be quadratic on `a:a:a:...`).
        out, pos = [], 0
        for head in _PAIR_HEAD.finditer(text):
            if head.start() < pos or not is_secret_name(head["name"]) \
                    or head["name"].lower().endswith("authorization"):  # (masked above, scheme kept)
                continue
            value = _PAIR_VALUE.match(text, head.end())
            if value is None:
                continue
            out.append(text[pos:head.end()])
            out.append(_mask_value(value.group(0)))
            pos = value.end()
        return "".join(out) + text[pos:]

    def flag(m: re.Match[str]) -> str:
        if not is_secret_name(m["flag"]):
            return m.group(0)
        return f"{m['flag']}{m['sep']}{MASK}"  # shell quotes around the value go with it

    text = _AUTH.sub(auth, text)
    text = _BEARER.sub(lambda m: f"{m['scheme']} {MASK}", text)
    text = _URL_CREDS.sub(lambda m: f"{m['pre']}{MASK}{m['at']}", text)
    text = _URL_TOKEN_USER.sub(lambda m: f"{m['pre']}{MASK}{m['at']}", text)
    text = _URL_PARAM.sub(lambda m: f"{m['pre']}{MASK}" if is_secret_name(m["name"]) else m.group(0), text)
    text = pairs(text)
    text = _FLAG_VALUE.sub(flag, text)
    return _TOKEN_SHAPES.sub(MASK, text)


def redact_env(mapping: Mapping[str, str]) -> dict[str, str]:
    """A copy of an environment: secret names masked, secret forms masked inside other values."""
    return {k: MASK if is_secret_name(k) else redact_text(str(v)) for k, v in mapping.items()}


def redact_args(argv: list[str]) -> list[str]:
    """A copy of a command line: `--api-key X [Y ...]`, `--hf-token=X`, `-e HF_TOKEN=X`,
    `-H 'Authorization: Bearer X'` and any secret form inside an argument masked."""
    out: list[str] = []
    masking = 0  # values seen since a secret flag, or 0 when not after one
    for arg in argv:
        # the first value is masked even when it starts with '-' (a key may); then every value
        # up to the next option (vLLM's --api-key takes several)
        if masking and not arg.startswith("--") and (masking == 1 or not arg.startswith("-")):
            out.append(MASK)
            masking += 1
            continue
        masking = 0
        if arg.startswith("-") and "=" in arg:
            flag, _, value = arg.partition("=")
            out.append(f"{flag}={_mask_value(value)}" if is_secret_name(flag) else redact_text(arg))
            continue
        if arg.startswith("--") and is_secret_name(arg):
            out.append(arg)
            masking = 1
            continue
        if "=" in arg and not arg.startswith("-"):
            name, _, value = arg.partition("=")
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name) and is_secret_name(name):
                out.append(f"{name}={_mask_value(value)}")
                continue
        out.append(redact_text(arg))
    return out
