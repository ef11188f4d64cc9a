from __future__ import annotations

import pytest

from harness.redact import MASK, redact_args, redact_env, redact_text

HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"


def test_env():
    got = redact_env(
        {
            "HF_TOKEN": "x",
            "VLLM_API_KEY": "k",
            "AWS_SECRET_ACCESS_KEY": "s",
            "DB_PASSWORD": "p",
            "PATH": "/usr/bin",
            "NOTE": f"token {HF}",
            "VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE": "163840",
        }
    )
    assert got == {
        "HF_TOKEN": MASK,
        "VLLM_API_KEY": MASK,
        "AWS_SECRET_ACCESS_KEY": MASK,
        "DB_PASSWORD": MASK,
        "PATH": "/usr/bin",
        "NOTE": f"token {MASK}",
        "VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE": "163840",
    }


ARGS = [
    (["vllm", "serve", "m", "--api-key", "abc"], ["vllm", "serve", "m", "--api-key", MASK]),
    (["--hf-token=xyz", "--port", "8000"], [f"--hf-token={MASK}", "--port", "8000"]),
    (
        ["docker", "run", "-e", "HF_TOKEN=abc", "-e", "VLLM_LOGGING_LEVEL=DEBUG"],
        ["docker", "run", "-e", f"HF_TOKEN={MASK}", "-e", "VLLM_LOGGING_LEVEL=DEBUG"],
    ),
    # sizes and tokenizers are not secrets
    (
        ["--max-num-batched-tokens", "65536", "--tokenizer", "/tok", "--tokenizer-mode", "auto"],
        ["--max-num-batched-tokens", "65536", "--tokenizer", "/tok", "--tokenizer-mode", "auto"],
    ),
    (["--model", HF], ["--model", MASK]),
]


@pytest.mark.parametrize(("argv", "expected"), ARGS)
def test_args(argv, expected):
    assert redact_args(argv) == expected


TEXT = [
    (f"export HF_TOKEN={HF}", f"export HF_TOKEN={MASK}"),
    ("OPENAI_API_KEY: sk-123 and MAX_JOBS=4", f"OPENAI_API_KEY: {MASK} and MAX_JOBS=4"),
    ("vllm serve m --api-key s3cret --port 8000", f"vllm serve m --api-key {MASK} --port 8000"),
    (f"logged in with {HF}.", f"logged in with {MASK}."),
    ("'hf_token': 'abc'", f"'hf_token': '{MASK}'"),
    ("GPU KV cache size: 872,960 tokens", "GPU KV cache size: 872,960 tokens"),
]


@pytest.mark.parametrize(("text", "expected"), TEXT)
def test_text(text, expected):
    assert redact_text(text) == expected


# --- every form a secret reaches us in: plant one, none may survive -------------------

SECRETS = {  # each value is unique, so a leak names its form
    "list": "sk-listvalued0000000000000000",
    "list2": "second-list-key-9f8e7d",
    "bearer": "bearer-cred-5b4a39c2e1d0",
    "basic": "dXNlcjpiYXNpYy1wYXNz",
    "auth_dict": "authdict-4c3b2a19",
    "kv_token": "kvtoken-77aa66bb",
    "kv_colon": "kvcolon-88cc99dd",
    "kv_quoted": "quoted secret with spaces",
    "password": "hunter2-pw-0001",
    "credential": "cred-31415926",
    "flag_space": "flagspace-2718281",
    "flag_eq": "flageq-1618033",
    "json": "jsonvalue-abcdef12",
    "json_escaped": "escapedjson-123abc",
    "url": "urlpass-9x8y7z",
    "hf": "hf_" + "Q" * 34,
    "gh": "ghp_" + "A1" * 18,
    "env_hf": "envhf-000111222",
    "env_custom": "envcustom-333444",
    "env_value_bearer": "envbearer-555666777",
    "dashed": "-starts-with-dash-secret",
    "camel": "camelcase-secret-42",
    "header": "xapikey-hdr-8080",
}
S = SECRETS

PLANTED_TEXT = [
    # vLLM 0.33 logs its non-default args as a dict repr: api_key is list-valued
    f"(APIServer pid=1) INFO non-default args: {{'model': '/m', 'api_key': ['{S['list']}', '{S['list2']}'], "
    "'max_model_len': 8192}",
    f"Namespace(api_key=['{S['list']}'], port=8000)",
    f"curl -H 'Authorization: Bearer {S['bearer']}' http://x/v1/models",
    f"Authorization: Basic {S['basic']}",
    f"{{'authorization': '{S['auth_dict']}', 'accept': '*/*'}}",
    f"retrying with token={S['kv_token']} after 1 s",
    f"db password: {S['password']}",
    f"credential={S['credential']}",
    f"aws secret_key: {S['kv_colon']}",
    f"'secret': '{S['kv_quoted']}'",
    f"vllm serve /m --api-key {S['flag_space']} --port 8000",
    f"vllm serve /m --api-key={S['flag_eq']}",
    f'{{"api_key": "{S["json"]}", "max_tokens": 256}}',
    f'"{{\\"hf_token\\": \\"{S["json_escaped"]}\\"}}"',
    f"git clone https://user:{S['url']}@github.com/org/repo",
    f"logged in as {S['hf']}.",
    f"GH {S['gh']}",
    f"X-Api-Key: {S['header']}",
    f"apiKey={S['camel']}",
]


def _leaks(text: str) -> list[str]:
    return [k for k, v in SECRETS.items() if v in text]


@pytest.mark.parametrize("line", PLANTED_TEXT)
def test_no_planted_secret_survives_in_text(line):
    assert _leaks(redact_text(line)) == [], redact_text(line)


def test_no_planted_secret_survives_in_commands():
    argv = ["python3", "-m", "vllm.entrypoints.cli.main", "serve", "/m",
            "--api-key", S["list"], S["list2"], "--port", "8000",
            f"--api-key={S['flag_eq']}", "--hf-token", S["dashed"],
            "-H", f"Authorization: Bearer {S['bearer']}", "-e", f"HF_TOKEN={S['env_hf']}",
            f"https://user:{S['url']}@host/x", S["gh"],
            "--compilation-config", f'{{"api_key": "{S["json"]}"}}']
    got = redact_args(argv)
    assert _leaks(" ".join(got)) == [], got
    assert got[:5] == argv[:5] and "--port" in got and "8000" in got  # the command stays readable


def test_no_planted_secret_survives_in_env():
    env = {"HF_TOKEN": S["env_hf"], "MY_SERVICE_CREDENTIAL": S["env_custom"],
           "EXTRA_HEADERS": f"Authorization: Bearer {S['env_value_bearer']}",
           "PIP_INDEX_URL": f"https://user:{S['url']}@pypi.example/simple", "NOTE": S["hf"],
           "VLLM_ARGS": f"--api-key {S['flag_space']}"}
    got = redact_env(env)
    assert _leaks(repr(got)) == [], got
    assert set(got) == set(env)


def test_a_list_valued_flag_is_masked_whole():
    line = "non-default args: {'api_key': ['sk-aaaaaaaaaaaaaaaaaaaaaaaa', 'b'], 'port': 8000}"
    assert redact_text(line) == f"non-default args: {{'api_key': {MASK}, 'port': 8000}}"


def test_bearer_keeps_its_scheme():
    assert redact_text("Authorization: Bearer abcdefgh12345") == f"Authorization: Bearer {MASK}"


NOT_SECRETS = [
    "max_tokens=256", "tokenizer=/models/tok", "--tokenizer /tok", "--tokenizer-mode auto",
    "--max-num-batched-tokens 65536", "prompt_token_ids: [1, 2, 3]", "num_tokens: 5",
    "GPU KV cache size: 872,960 tokens", "Maximum concurrency for 8,192 tokens per request: 106.56x",
    "'max_model_len': 8192, 'api_key': None", "author=alice", "monkeypatch=1", "kv_cache_dtype=auto",
    "token_budget=4096", "--ssl-keyfile /etc/ssl/k.pem", "moe=marlin,lin=auto",
    "Authorization header missing", "the bearer of bad news",
]


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_not_over_masked(text):
    assert redact_text(text) == text


# --- the one rule, form by form (every output and stored file goes through it) -------------

LONG = "X" * 200
RULE = [
    # URL credentials of any shape
    ("git clone https://user:p@ss@github.com/o/r", f"git clone https://user:{MASK}@github.com/o/r"),
    ("tcp://admin:hunter2@gpu-box:2376", f"tcp://admin:{MASK}@gpu-box:2376"),
    ("tcp://:hunter2@h:2376", f"tcp://{MASK}@h:2376"),
    ("https://ghp_" + "a1" * 18 + "@github.com/o/r", f"https://{MASK}@github.com/o/r"),
    ("https://abcdef@github.com/o/r", f"https://{MASK}@github.com/o/r"),  # a user alone: a token's place
    ("https://tok3n1234567890abcdef:x-oauth-basic@github.com/o", f"https://{MASK}@github.com/o"),
    ("engine ssh://lab@gpu-box:22 is up", f"engine ssh://{MASK}@gpu-box:22 is up"),
    ("ssh://-oProxyCommand=touch@host", f"ssh://{MASK}@host"),
    ("'https://u:s3@cret@h/x'", f"'https://u:{MASK}@h/x'"),
    # query tokens
    ("--index https://h/simple?token=abc123", f"--index https://h/simple?token={MASK}"),
    ("https://h/pypi/x/json?api_key=abc&x=1", f"https://h/pypi/x/json?api_key={MASK}&x=1"),
    ("https://h/?a=1&access_token=abc", f"https://h/?a=1&access_token={MASK}"),
    # names of any length ending in _TOKEN / _KEY / _SECRET / _PASSWORD
    (f"{LONG}_TOKEN=abc", f"{LONG}_TOKEN={MASK}"),
    (f"{LONG}_KEY: abc", f"{LONG}_KEY: {MASK}"),
    (f"export {LONG}_SECRET='a b'", f"export {LONG}_SECRET='{MASK}'"),
    (f"{LONG}_PASSWORD=abc and PORT=1", f"{LONG}_PASSWORD={MASK} and PORT=1"),
    ("9-api_key=abc", f"9-api_key={MASK}"),
    # dict entries, as a log prints them
    ("{'x_token': 'abc', 'port': 8000}", f"{{'x_token': '{MASK}', 'port': 8000}}"),
    ('{"db_password": "abc", "max_tokens": 8}', f'{{"db_password": "{MASK}", "max_tokens": 8}}'),
    # flags in logs
    ("run --x-token abc --port 1", f"run --x-token {MASK} --port 1"),
    ("run --api-key=abc --port 1", f"run --api-key={MASK} --port 1"),
    (f"run --{LONG}-token abc", f"run --{LONG}-token {MASK}"),
    ("A--api-key abc", f"A--api-key {MASK}"),
]


@pytest.mark.parametrize(("text", "expected"), RULE)
def test_the_one_rule(text, expected):
    assert redact_text(text) == expected


KEPT = [
    "git@github.com:org/repo.git",  # not a URL: scp-like, no credential
    "https://github.com/vllm-project/vllm/pull/1",
    "mail me at user@example.com",
    "token_count_source: usage", "token_counts_reliable=True", "num_api_keys: 2",
    "the max-token count", "--max-tokens 256",
    "https://h/x?page=2&per_page=100",
]


@pytest.mark.parametrize("text", KEPT)
def test_the_rule_leaves_what_is_not_secret(text):
    assert redact_text(text) == text


def test_json_is_masked_inside_its_strings_and_stays_json():
    import json

    from harness.redact import redact_json

    doc = {"token_counts_reliable": True, "token_count_source": "usage", "api_key": "abc", "hf_token": None,
           "session_secret": 1234, "url": "https://u:pw@h/x?token=t", "env": {"HF_TOKEN": "hf", "PATH": "/b"},
           "command": ["vllm", "serve", "--api-key", "k", "--port", "8000"], "nested": [{"password": ""}],
           "note": "export MY_API_KEY=abc"}
    got = redact_json(doc)
    assert json.loads(json.dumps(got)) == got
    assert got == {
        "token_counts_reliable": True, "token_count_source": "usage", "api_key": MASK, "hf_token": None,
        "session_secret": MASK, "url": f"https://u:{MASK}@h/x?token={MASK}",
        "env": {"HF_TOKEN": MASK, "PATH": "/b"},
        "command": ["vllm", "serve", "--api-key", MASK, "--port", "8000"], "nested": [{"password": ""}],
        "note": f"export MY_API_KEY={MASK}",
    }


@pytest.mark.parametrize("text,want", [
    # the audit's verdict lines, as the H200 run's build record stored them: `pass` is a verdict
    ("sm_121: pass: SM_121: NVFP4/FP4 GEMM kernels exist only as sm_121a",
     "sm_121: pass: SM_121: NVFP4/FP4 GEMM kernels exist only as sm_121a"),
    ("status: pass", "status: pass"),
    # a longer name or a flag ending in pass still names a password
    ("DB_PASS=hunter2", f"DB_PASS={MASK}"), ("SMTP_PASS: hunter2", f"SMTP_PASS: {MASK}"),
    ("--pass hunter2", f"--pass {MASK}"),
])
def test_a_bare_pass_is_a_verdict_not_a_password(text, want):
    assert redact_text(text) == want


# -- credential flags whose name says nothing (curl -u, mysql -p) -----------------------------------

CREDENTIAL_ARGS = [
    (["curl", "-u", "user:PASS", "https://h"], ["curl", "-u", f"user:{MASK}", "https://h"]),
    (["curl", "-uuser:PASS"], ["curl", f"-uuser:{MASK}"]),
    (["curl", "--user", "bob:PASS"], ["curl", "--user", f"bob:{MASK}"]),
    (["curl", "--user=bob:PASS"], ["curl", f"--user=bob:{MASK}"]),
    (["curl", "-U", "proxy:PASS"], ["curl", "-U", f"proxy:{MASK}"]),
    (["curl", "--proxy-user", "p:PASS"], ["curl", "--proxy-user", f"p:{MASK}"]),
    (["mysql", "-uroot", "-pPASS", "db"], ["mysql", "-uroot", f"-p{MASK}", "db"]),
    (["sshpass", "-pPASS", "ssh", "h"], ["sshpass", f"-p{MASK}", "ssh", "h"]),
    (["tool", "--password", "PASS", "--password=PASS"], ["tool", "--password", MASK, f"--password={MASK}"]),
    (["tool", "--token", "PASS"], ["tool", "--token", MASK]),
    (["curl", "-H", "Authorization: Basic UEFTUw=="], ["curl", "-H", f"Authorization: Basic {MASK}"]),
    (["docker", "login", "--password-stdin", "-u", "bob"], ["docker", "login", "--password-stdin", "-u", "bob"]),
]


@pytest.mark.parametrize(("argv", "want"), CREDENTIAL_ARGS)
def test_credential_flags_in_a_command_line(argv, want):
    assert redact_args(argv) == want


CREDENTIAL_TEXT = [
    ("sh -c 'curl -u user:PASS https://h'", f"sh -c 'curl -u user:{MASK} https://h'"),
    ("curl --user \"bob:PASS\" x", f"curl --user \"bob:{MASK}\" x"),
    ("curl --user=bob:PASS x", f"curl --user=bob:{MASK} x"),
    ("mysql -uroot -pPASS db", f"mysql -uroot -p{MASK} db"),
    ("tool --password PASS --token=PASS", f"tool --password {MASK} --token={MASK}"),
]


@pytest.mark.parametrize(("text", "want"), CREDENTIAL_TEXT)
def test_credential_flags_in_free_text(text, want):
    assert redact_text(text) == want


@pytest.mark.parametrize("text", [
    "gcc -pthread -pedantic -pipe -pie -pg -O2 -c x.c",  # compiler options glued to -p
    "nvcc -ptx a.cu -prec-div=true -prec-sqrt=false",
    "docker run -p 8000:8000 -p127.0.0.1:80:80/tcp img",  # ports
    "docker run -u 1000:1000 img", "id -u 1000:1000",  # a uid:gid
    "mkdir -p /tmp/x", "sort -u file", "pip install -U vllm",
])
def test_credential_flag_rules_leave_what_is_not_a_password(text):
    assert redact_text(text) == text
    assert redact_args(text.split()) == text.split()


@pytest.mark.parametrize("token", [
    "pypi-AgEIcHlwaS5vcmcCJGFhYWFhYWFhLWFhYWEtYWFhYS1hYWFhLWFhYWFhYWFhYWFhYQ",
    "npm_" + "a1B2" * 9, "AIza" + "SyA1" * 8 + "abc", "sk_live_" + "a1B2" * 6, "ASIA" + "ABCDEFGHIJKLMNOP",
])
def test_more_token_shapes(token):
    assert redact_text(f"using {token} now") == f"using {MASK} now"


def test_a_stored_record_masks_a_command_under_any_key():
    """bisect.json keeps a probe build's command as `builder`, result.json as `command`: every list
    of strings is read as a command line, so a flag's value in the next item is masked."""
    from harness.redact import redact_json

    doc = {"probe": {"command": ["curl", "-u", "u:PASS1"], "builder": ["tool", "--password", "PASS2"],
                     "steps": [["x", "-pPASS3"]]}}
    assert "PASS" not in str(redact_json(doc))
    assert redact_json(doc)["probe"]["command"] == ["curl", "-u", f"u:{MASK}"]


def test_a_4_mb_line_is_masked_to_its_end():
    # a 4 MB run of one word, then a URL: the URL mask is tried where a :// is, not at every position
    line = "x" * (4 << 20) + " https://u:PASS@h/x"
    assert redact_text(line).endswith(f"https://u:{MASK}@h/x")


def test_a_secret_flags_value_is_masked_before_the_short_flag_rules():
    assert redact_args(["--api-key", "-uXYZ", "--port", "1"]) == ["--api-key", MASK, "--port", "1"]
    # a list item with spaces is a line of text (a stored verdict's log lines), read as text
    assert redact_args(["--api-key sekrit-1"]) == [f"--api-key {MASK}"]
    assert redact_args(["-Undefined reference: x"]) == ["-Undefined reference: x"]
