"""Remove secrets before anything is written to a result, a log excerpt or a bug report.

A name is secret when one of its words (split at _ - . and camelCase) is token, key, secret,
password, passwd, credential, auth, authorization, private, session or cookie, or its last word
is pass in a longer name or a flag (DB_PASS, --pass; a bare `pass:` is a verdict) (HF_TOKEN, api_key, X-Api-Key, apiKey,
AWS_SECRET_ACCESS_KEY), unless it is a count or size of them (max_tokens, token_ids,
tokenizer: those words differ). A secret name's value is masked in every form a log or a
command writes it: `NAME=v`, `NAME: v`, `'name': 'v'`, `'name': ['v1', 'v2']` (vLLM's
non-default args), `--name v`, `--name=v`. `Authorization: Bearer v`, credentials in URLs and
values shaped like well-known tokens (hf_, sk-, ghp_, github_pat_, glpat-, xox?-, AKIA, JWTs)
are masked wherever they appear. The mask keeps the name, so a reader knows it was set.

Credential flags whose name says nothing: `-u user:PASS`, `-uuser:PASS`, `--user user:PASS`,
`--user=user:PASS` (curl's, and -U / --proxy-user) keep the user and mask the password (a
uid:gid such as `-u 1000:1000` stays); a password glued to `-p` (`-pPASS`: mysql, sshpass) is
masked, unless it is a port (`-p8000:8000`) or a compiler option (`-pthread`, `-pedantic`,
`-pipe`, `-pie`, `-pg`, ...). Every output applies the same rule: the terminal (harness.console,
tables included), `-v`'s command lines (harness.proc), `--json` and every stored record.

A URL's user part is masked whatever its shape: `scheme://user:***@host` for a name and a password
(the password may hold `@`: the user part ends at the last `@` before the host), and
`scheme://***@host` for a user alone (a token goes there, and `ssh://` users are not shown) or a
user that looks like a token. Names have no length limit (`<200 characters>_TOKEN=v` is masked).

Machine output (`--json`) is masked with `redact_json`, inside string values only, so it stays
JSON: a key that names a secret masks its string or number, never a boolean or null.
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
    "stdin",  # docker login --password-stdin: a switch, the secret comes on standard input
})
# a word anywhere that makes the name about how many secrets there are (token_count_source,
# token_counts_reliable, num_api_keys), never a secret itself
_COUNT_WORDS = frozenset({"count", "counts", "num", "number", "len", "length", "size", "sizes", "ids"})
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
    r"|\bpypi-AgE[A-Za-z0-9_-]{30,}"
    r"|\bnpm_[A-Za-z0-9]{30,}\b"
    r"|\bAIza[0-9A-Za-z_-]{35}\b"
    r"|\b[sr]k_(?:live|test)_[A-Za-z0-9]{20,}"
    r"|\bASIA[0-9A-Z]{16}\b"
)
_HF_TOKEN = _TOKEN_SHAPES  # the old name, for callers that imported it
# Authorization: Bearer v / Basic v / v, as a header line, a dict entry or a curl -H argument
_AUTH = re.compile(
    r"(?i)(?P<head>\b(?:proxy-)?authorization\\?['\"]?\s*[:=]\s*\\?['\"]?)"
    r"(?:(?P<scheme>bearer|basic|token|digest|apikey)\s+)?(?P<cred>[^\s'\",}\\]+)"
)
_BEARER = re.compile(r"(?i)\b(?P<scheme>bearer)\s+(?P<cred>[A-Za-z0-9._~+/=-]{8,})")
# scheme://USERINFO@host: the user part runs to the last `@` before the path, query or fragment
# (a password may hold `@`); schemes are short, so each search stays linear without a word
# boundary ("1http://u:p@h" has none)
_URL_USERINFO = re.compile(r"(?P<pre>[a-z][a-z0-9+.-]{0,15}://)(?P<cred>[^\s/?#'\"<>\\]+)(?P<at>@)", re.I)
_PLAIN_USER = re.compile(r"[A-Za-z0-9._-]{1,32}")
# ?access_token=v, &token=v, ;sessionid=v in a URL's query or parameters
_URL_PARAM = re.compile(r"(?P<pre>[?&;](?P<name>[A-Za-z0-9_.%-]{1,64})=)(?P<value>[^&#;,)\s'\"<>]+)")
# NAME=VALUE, NAME: VALUE, 'name': value, "name": value, \"name\": value; the value quoted,
# a [list], a (tuple) or bare. (vLLM FrontendArgs, vllm/entrypoints/openai/cli_args.py, has
# `api_key: list[str] | None`: its "non-default args" log line prints the keys as a list.)
_PAIR = re.compile(
    r"(?P<nq>\\?['\"]?)(?P<name>\b[A-Za-z_][A-Za-z0-9_.-]*)(?P=nq)(?P<sep>\s*[=:]\s*)"
    r"(?P<value>\\\"[^\"\n]*?\\\"|'[^'\n]*'|\"[^\"\n]*\"|\[[^\]\n]*\]|\([^)\n]*\)|[^\s'\",;&)}\]]+)"
)
# A name (or a flag) of any length is seen whole where a run of name characters starts; inside a
# run (after `.`, `-` or a digit) only up to 128 characters are tried: either way each search
# stays linear (an unbounded name at every `\b` made it quadratic on `a.a.a.a...`)
_PAIR_HEAD = re.compile(
    r"(?P<nq>\\?['\"]?)(?P<name>(?<![A-Za-z0-9_.-])-*[A-Za-z_][A-Za-z0-9_.-]*|\b[A-Za-z_][A-Za-z0-9_.-]{0,127})(?P=nq)(?P<sep>\s*[=:]\s*)")
_PAIR_VALUE = re.compile(_PAIR.pattern[_PAIR.pattern.index("(?P<value>"):])
_FLAG_VALUE = re.compile(
    r"(?P<flag>(?<![A-Za-z0-9_.-])--[A-Za-z0-9][A-Za-z0-9_.-]*|--[A-Za-z0-9][A-Za-z0-9_.-]{0,127})(?P<sep>\s+)(?P<value>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"-][^\s]*)"
)
_EMPTY = frozenset({"None", "null", "''", '""', "[]", "()", "false", "False", "\\\"\\\""})

# flags whose value is `user:password` (curl -u/--user, -U/--proxy-user)
_USER_FLAGS = frozenset({"-u", "-U", "--user", "--proxy-user"})
# `-u user:PASS`, `-uuser:PASS`, `--user=user:PASS` in free text (a shell command line in a log);
# the flag stands alone (after a space, a quote or the start), the value may be quoted
_USER_TEXT = re.compile(
    r"(?<![^\s'\"=(])(?P<flag>--user|--proxy-user|-u|-U)(?P<sep>=|\s+|(?=[^\s'\"-]))(?P<q>['\"]?)"
    r"(?P<user>[^\s'\":]*):(?P<pw>[^\s'\"]+)")
# a password glued to -p (mysql -pPASS, sshpass -pPASS), in an argument or in free text
_P_GLUED = re.compile(r"(?<![^\s'\"(])-p(?P<pw>[^\s'\"-][^\s'\"]*)")
# what follows a glued -p and is not a password: a port mapping, compiler and linker options
_P_NOT_SECRET = re.compile(
    r"[0-9.:\[\]a-fA-F]*[0-9](?:-[0-9]+)?(?::[0-9]+(?:-[0-9]+)?)?(?:/(?:tcp|udp|sctp))?"
    r"|threads?|edantic(?:-errors)?|ipe|ie|ic|IC|IE|g|tx|rint-\S*|aram|ass-exit-codes|rec-(?:div|sqrt)=\S*"
    r"|lugin\S*|ython\S*|\d+")
_UID_GID = re.compile(r"[0-9]+:[0-9]+")


def _user_value(value: str) -> str:
    """`user:PASS` -> `user:***` (a uid:gid stays); a value with no colon is a user name alone,
    unless it is shaped like a token."""
    if _UID_GID.fullmatch(value):
        return value
    user, colon, _pw = value.partition(":")
    if colon:
        return f"{user}:{MASK}"
    return MASK if _TOKEN_SHAPES.search(value) or (len(value) >= 24 and any(c.isdigit() for c in value)) else value


def _glued_p(m: re.Match[str]) -> str:
    return m.group(0) if _P_NOT_SECRET.fullmatch(m["pw"]) else f"-p{MASK}"


def is_secret_name(name: str) -> bool:
    bare = name.lstrip("-")
    if bare.upper().replace("-", "_") in _ALWAYS:
        return True
    words = [w.lower() for part in re.split(r"[^A-Za-z0-9]+", bare) for w in _WORD.findall(part)]
    if not words or words[-1] in _NOT_SECRET_TAIL or not _COUNT_WORDS.isdisjoint(words):
        return False
    # `pass` alone is a verdict (`pass: SM_121: ...`, `status: pass`), not a password: it masks as
    # the last word of a longer name (DB_PASS) or as a flag (--pass), never as a bare word
    last_only = len(words) > 1 or bare != name
    return (words[-1] in _SECRET_LAST and last_only) or any(w in _SECRET_WORDS or w.endswith(_SECRET_ENDINGS)
                                                           for w in words)


def _mask_value(value: str) -> str:
    if value in _EMPTY:
        return value  # "not set" is worth seeing, and hides nothing
    if value[:2] == '\\"':
        return f'\\"{MASK}\\"'
    if value[:1] in "'\"":
        return f"{value[0]}{MASK}{value[0]}"
    return MASK


_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")


def _sub_userinfo(text: str, repl) -> str:
    """`_URL_USERINFO.sub(repl, text)`, tried only where a `://` is: the pattern's scheme part,
    tried at every position of a long line, made the whole mask several times slower."""
    out: list[str] = []
    pos, find = 0, text.find("://")
    while find >= 0:
        start = find
        while start > max(pos, find - 16) and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        while start < find and not (text[start].isascii() and text[start].isalpha()):
            start += 1
        m = _URL_USERINFO.match(text, start) if start < find else None
        if m is not None:
            out += (text[pos:start], repl(m))
            pos = m.end()
        find = text.find("://", max(find + 3, pos))
    return "".join(out) + text[pos:]


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

    def userinfo(m: re.Match[str]) -> str:
        user, colon, _password = m["cred"].partition(":")
        # a plain name before a password stays (who logs in); a user alone, or one shaped like
        # a token (long with a digit, or a known token form), is masked whole
        keep = colon and _PLAIN_USER.fullmatch(user) and not (len(user) >= 16 and any(c.isdigit() for c in user)) \
            and not _TOKEN_SHAPES.search(user)
        return f"{m['pre']}{user}:{MASK}{m['at']}" if keep else f"{m['pre']}{MASK}{m['at']}"

    def flag(m: re.Match[str]) -> str:
        if not is_secret_name(m["flag"]):
            return m.group(0)
        return f"{m['flag']}{m['sep']}{MASK}"  # shell quotes around the value go with it

    text = _AUTH.sub(auth, text)
    text = _BEARER.sub(lambda m: f"{m['scheme']} {MASK}", text)
    text = _sub_userinfo(text, userinfo)
    text = _URL_PARAM.sub(lambda m: f"{m['pre']}{MASK}" if is_secret_name(m["name"]) else m.group(0), text)
    text = pairs(text)
    text = _FLAG_VALUE.sub(flag, text)
    if "-u" in text or "-U" in text or "--user" in text or "--proxy-user" in text:
        text = _USER_TEXT.sub(lambda m: m.group(0) if _UID_GID.fullmatch(f"{m['user']}:{m['pw']}") else
                              f"{m['flag']}{m['sep']}{m['q']}{m['user']}:{MASK}", text)
    if "-p" in text:
        text = _P_GLUED.sub(_glued_p, text)
    return _TOKEN_SHAPES.sub(MASK, text)


# Terminal control characters (C0 but tab and newline, DEL, C1): a commit subject, a path or a
# command's output holding ESC ] 0 ; ... or ESC [ 2 J would retitle or clear the user's terminal.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_text(text: str) -> str:
    """`text` as a terminal may show it: secrets masked, control characters shown as `?`."""
    return CONTROL.sub("?", redact_text(text))


def redact_env(mapping: Mapping[str, str]) -> dict[str, str]:
    """A copy of an environment: secret names masked, secret forms masked inside other values."""
    return {k: MASK if is_secret_name(k) else redact_text(str(v)) for k, v in mapping.items()}


def redact_args(argv: list[str]) -> list[str]:
    """A copy of a command line: `--api-key X [Y ...]`, `--hf-token=X`, `-e HF_TOKEN=X`,
    `-H 'Authorization: Bearer X'` and any secret form inside an argument masked."""
    out: list[str] = []
    masking = 0  # values seen since a secret flag, or 0 when not after one
    user_next = False  # the argument after -u / --user is `user:password`
    for arg in argv:
        if user_next:
            user_next = False
            out.append(_user_value(arg))
            continue
        # the first value is masked even when it starts with '-' (a key may); then every value
        # up to the next option (vLLM's --api-key takes several)
        if masking and not arg.startswith("--") and (masking == 1 or not arg.startswith("-")):
            out.append(MASK)
            masking += 1
            continue
        masking = 0
        if arg in _USER_FLAGS:
            out.append(arg)
            user_next = True
            masking = 0
            continue
        if arg.startswith(("--user=", "--proxy-user=")):
            flag, _, value = arg.partition("=")
            out.append(f"{flag}={_user_value(value)}")
            masking = 0
            continue
        token = not any(c.isspace() for c in arg)  # one argument, not a line of text in a list
        if token and len(arg) > 2 and arg[:2] in ("-u", "-U") and arg[2] not in "-=":
            out.append(arg[:2] + _user_value(arg[2:]) if ":" in arg else redact_text(arg))
            masking = 0
            continue
        if token and len(arg) > 2 and arg.startswith("-p") and arg[2] != "-":
            out.append(_P_GLUED.sub(_glued_p, arg))
            masking = 0
            continue
        if arg.startswith("-") and "=" in arg:
            flag, _, value = arg.partition("=")
            out.append(f"{flag}={_mask_value(value)}" if is_secret_name(flag) else redact_text(arg))
            continue
        if token and arg.startswith("--") and is_secret_name(arg):
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


_ENV_KEYS = frozenset({"env", "environ", "environment"})


def redact_json(obj: object, key: str = "") -> object:
    """A copy of JSON data with every secret masked, still the same JSON shape: strings are
    masked as free text (or as a command line under `command`/`argv`, an environment under
    `env`); a secret key's string or number becomes the mask; booleans, null and the other
    numbers stay as they are (`"token_counts_reliable": true` is a flag, not a secret)."""
    if isinstance(obj, dict):
        if key in _ENV_KEYS and all(isinstance(v, str) for v in obj.values()):
            return {redact_text(str(k)): v for k, v in redact_env({str(k): v for k, v in obj.items()}).items()}
        return {redact_text(k) if isinstance(k, str) else k: redact_json(v, str(k)) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        if obj and all(isinstance(a, str) for a in obj):
            # any list of strings may be a command line (`command`, a probe's `builder`, a
            # record's `argv`): a secret flag's value is the next item, not the flag's own
            return redact_args(list(obj))
        return [redact_json(v, key) for v in obj]
    if isinstance(obj, bool) or obj is None:
        return obj
    if isinstance(obj, str):
        return _mask_value(obj) if key and obj and is_secret_name(key) else redact_text(obj)
    if isinstance(obj, int | float) and key and is_secret_name(key):
        return MASK
    return obj


def redact_json_text(text: str, indent: int | None = 2) -> str:
    """`text` masked as JSON when it parses as JSON (dumped back with `indent`), else as free text."""
    import json

    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return redact_text(text)
    return json.dumps(redact_json(data), indent=indent, ensure_ascii=False)
