"""[hosts] in the matrix, the placement of cells on hosts, and the scheduler, without an engine."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import pytest

from harness.errors import MatrixError
from harness.matrix.load import load_matrix
from harness.matrix.plan import expand
from harness.run.schedule import (
    Board,
    Host,
    gpus_needed,
    hosts_of,
    placement,
    simulate,
    why_not,
)

BASE = """
[matrix]
name = "hosts"
hardware = "spark"

[hardware.spark]
cc = "12.1"
bandwidth_gbs = 273
memory_gib = 128

[hardware.rtx]
cc = "12.0"
bandwidth_gbs = 1792
memory_gib = 96

[stacks.spark121a]
torch_cuda_arch_list = "12.1a"
base_image = { repository = "nvidia/cuda", tag = "13.0.1-devel-ubuntu24.04" }
torch = { version = "2.10.0" }
vllm = { pypi = "0.33.0" }
flashinfer = { version = "0.7.2.post1" }

[stacks.family]
torch_cuda_arch_list = "12.0f"
base_image = { repository = "nvidia/cuda", tag = "13.0.1-devel-ubuntu24.04" }
torch = { version = "2.10.0" }
vllm = { pypi = "0.33.0" }
flashinfer = { version = "0.7.2.post1" }

[models.qwen]
checkpoint = "Qwen/Qwen3-30B-A3B-FP8"
quantization = "fp8"
active_params_b = 3.3
bytes_per_param = 1.0

[configs.tp1]

[configs.tp2]
args = ["--tensor-parallel-size", "2"]
"""


def _load(tmp_path: Path, extra: str):
    path = tmp_path / "m.toml"
    path.write_text(BASE + extra)
    return load_matrix(path)


def _problems(tmp_path: Path, extra: str) -> list[str]:
    with pytest.raises(MatrixError) as info:
        _load(tmp_path, extra)
    return info.value.problems


def test_no_hosts_is_one_local_host_with_one_slot_that_takes_every_cell(tmp_path):
    m = _load(tmp_path, "")
    (host,) = hosts_of(m)
    assert host.default and host.url is None and host.slots == 1 and host.gpus is None
    # today's behaviour: every cell runs on the local engine, whatever its arch list
    assert set(placement(expand(m), [host], m).values()) == {("local",)}


def test_hosts_load_into_frozen_records(tmp_path):
    m = _load(tmp_path, """
[hosts.spark]
engine = "ssh://lab@spark.lan"
[hosts.rtx]
engine = "tcp://rtx.lan:2376"
hardware = "rtx"
gpus = [0, 1]
network = "host"
ports = [9000, 9009]
tls = { ca_cert = "ca.pem", client_cert = "cert.pem", client_key = "key.pem" }
""")
    spark, rtx = hosts_of(m)
    assert (spark.name, spark.url, spark.hardware, spark.cc, spark.gpus, spark.slots, spark.address) == (
        "spark", "ssh://lab@spark.lan", "spark", "12.1", None, 1, "spark.lan")
    assert (rtx.hardware, rtx.cc, rtx.gpus, rtx.slots, rtx.network, rtx.address) == (
        "rtx", "12.0", ("0", "1"), 2, "host", "rtx.lan")
    assert rtx.tls.client_cert == "cert.pem" and rtx.slot_port(1) == 9001
    with pytest.raises(AttributeError):
        rtx.slots = 3  # frozen past loading


@pytest.mark.parametrize("extra, needle", [
    ('[hosts.a]\nengine = "docker.lan:2375"', "hosts.a.engine: 'docker.lan:2375' is not a Docker engine URL"),
    ('[hosts.a]\nhardware = "h200"', "hosts.a.hardware: 'h200' is not a hardware profile (defined: spark, rtx)"),
    ('[hosts.a]\ngpus = [0, 0]', "gpus lists a GPU twice"),
    ('[hosts.a]\ngpus = []', "write gpus = 'none'"),
    ('[hosts.a]\ngpus = [0, 1, 2]\nports = [9000, 9001]', "hold fewer than the 3 slots"),
    ('[hosts.a]\nstacks = ["nope*"]', "hosts.a.stacks[0]: 'nope*' names no stack"),
    ('[hosts.a]\nengine = "ssh://x"\ntls = { client_cert = "c", client_key = "k" }', "tls applies to a tcp:// engine"),
    ('[hosts.a]\nslot = 2', "hosts.a.slot: unknown key (valid keys here: description, engine, tls, hardware"),
    # ssh reads a user or host that starts with '-' as an option: refused at load, so `plan` says so
    ('[hosts.a]\nengine = "ssh://-oProxyCommand=touch%20/tmp/x@host"', "starts with '-'"),
    ('[hosts.a]\nengine = "ssh://lab@-oProxyCommand=x"', "starts with '-'"),
])
def test_bad_hosts_are_one_clear_problem_naming_the_key(tmp_path, extra, needle):
    problems = _problems(tmp_path, extra)
    assert any(needle in p for p in problems), problems


def test_cells_go_to_hosts_whose_hardware_their_arch_list_covers(tmp_path):
    m = _load(tmp_path, """
[hosts.spark]
[hosts.rtx]
hardware = "rtx"
gpus = [0, 1]
""")
    hosts = hosts_of(m)
    where = placement(expand(m), hosts, m)
    assert where["spark121a/qwen/tp1"] == ("spark",)  # 12.1a code does not run on the RTX (12.0)
    assert where["family/qwen/tp1"] == ("spark", "rtx")  # 12.0f runs on the whole 12.x family
    assert where["family/qwen/tp2"] == ("spark", "rtx")
    assert "built for 12.1a, host rtx has cc 12.0" in why_not(expand(m, "spark121a and tp1")[0], hosts[1], m)


def test_gpus_needed_is_tensor_times_pipeline_parallel_size(tmp_path):
    m = _load(tmp_path, """
[configs.both]
args = ["-tp", "2", "--pipeline-parallel-size=2"]
""")
    need = {c.config_name: gpus_needed(c, m) for c in expand(m, "family")}
    assert need == {"tp1": 1, "tp2": 2, "both": 4}
    none = _load(tmp_path, '[serve]\ngpus = "none"\n[configs.both]\nargs = ["-tp", "2"]')
    assert {gpus_needed(c, none) for c in expand(none)} == {0}


def _host(name: str, gpus=None, slots=1) -> Host:
    return Host(name=name, url=None, hardware="x", cc="", gpus=gpus, slots=slots)


def test_a_cell_asking_for_two_gpus_waits_for_two_on_one_host_and_is_not_passed_by():
    h = _host("a", gpus=("0", "1"), slots=2)
    order = ["one", "big", "two", "three"]
    need = {"one": 1, "big": 2, "two": 1, "three": 1}
    where = {c: ("a",) for c in order}
    placed = {p.cell: p for p in simulate(order, [h], where, need, lambda c: 10.0)}
    assert placed["one"].start == 0 and placed["one"].gpus == ("0",)
    # `big` needs both GPUs: the free one is NOT given to `two` meanwhile (no starvation)
    assert placed["big"].start == 10 and placed["big"].gpus == ("0", "1")
    assert placed["two"].start == 20 and placed["three"].start == 20
    assert {placed["two"].gpus, placed["three"].gpus} == {("0",), ("1",)}


def test_two_hosts_two_slots_run_twelve_equal_cells_in_three_waves():
    hosts = [_host("a", slots=2), _host("b", slots=2)]
    order = [f"c{i}" for i in range(12)]
    placed = simulate(order, hosts, {c: ("a", "b") for c in order}, dict.fromkeys(order, 0), lambda c: 5.0)
    assert max(p.end for p in placed) == 15.0
    assert {(p.host, p.slot) for p in placed} == {("a", 0), ("a", 1), ("b", 0), ("b", 1)}
    for t in (0.0, 5.0, 10.0):  # at no time does one slot hold two cells
        assert len([p for p in placed if p.start == t]) == 4


def test_a_cell_no_host_can_take_is_left_out_of_the_schedule():
    placed = simulate(["x", "y"], [_host("a")], {"x": ("a",), "y": ()}, {"x": 0, "y": 0}, lambda c: 1.0)
    assert [p.cell for p in placed] == ["x"]


def test_board_hands_gpus_to_one_slot_at_a_time_and_drops_a_gone_host():
    a, b = _host("a", gpus=("0", "1"), slots=2), _host("b")
    board = Board(["p", "q", "r", "only-a"], [a, b],
                  {"p": ("a", "b"), "q": ("a", "b"), "r": ("a", "b"), "only-a": ("a",)},
                  {"p": 1, "q": 1, "r": 1, "only-a": 1})
    p = board.take(a)
    q = board.take(a)
    assert {p, q} == {("p", ("0",)), ("q", ("1",))}
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(board.take(a)))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()  # both GPUs are out: the third cell waits
    assert board.take(b) == ("r", None)  # host b has no GPU pool: 'all' as is
    assert board.drop_host("a") == ["only-a"]  # nothing else can run it
    waiter.join(60)  # returns as soon as the waiter ends; the bound is for a busy machine
    assert got == [None]  # host a is gone: its waiting slot ends


def test_a_slot_gives_its_gpus_to_its_container_only():
    from harness.serve.base import ServeSpec
    from harness.serve.stage import with_gpus

    spec = ServeSpec(cell_id="c", argv=("python3",), env={}, port=8000, log_path=Path("/dev/null"), gpus="all")
    assert with_gpus(spec, ("2", "3"), local=False).gpus == "2,3"
    assert with_gpus(spec, None, local=False).gpus == "all"  # a host lending 'all'
    assert with_gpus(dataclasses.replace(spec, gpus=None), ("2",), local=False).gpus is None  # asks none
    local = with_gpus(spec, ("1",), local=True)
    assert local.env == {"CUDA_VISIBLE_DEVICES": "1"} and local.gpus == "all"


def test_plan_shows_the_assignment(tmp_path, capsys):
    from harness.cli import main

    path = tmp_path / "m.toml"
    path.write_text(BASE + """
[hosts.spark]
engine = "ssh://lab@spark.lan"
[hosts.rtx]
engine = "tcp://rtx.lan:2376"
hardware = "rtx"
gpus = [0]
""")
    assert main(["plan", "-m", str(path), "--json"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["spark121a/qwen/tp1"]["hosts"] == ["spark"]
    assert rows["family/qwen/tp1"]["hosts"] == ["spark", "rtx"]
    assert rows["family/qwen/tp2"]["hosts"] == ["spark"]  # rtx lends one GPU
    assert rows["family/qwen/tp2"]["gpus_needed"] == 2
    assert {r["slot"] for r in rows.values()} <= {"spark#0", "rtx#0"}
    path.write_text(path.read_text() + '[configs.pp2]\nnodes = 2\nargs = ["-pp", "2"]\n')
    assert main(["plan", "-m", str(path), "--json", "-k", "family"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["family/qwen/pp2"]["slot"] == "spark+rtx" and rows["family/qwen/pp2"]["nodes"] == 2
    assert rows["family/qwen/pp2"]["wave"] > max(r["wave"] for r in rows.values() if r["nodes"] == 1)
    # spark121a runs on spark alone: its pp2 cell (2 nodes) could never start, and plan says so
    assert main(["plan", "-m", str(path)]) == 2
    assert "configs.pp2.nodes = 2, but only 1 host(s) can take cell spark121a/qwen/pp2" in capsys.readouterr().err
    assert main(["plan", "-m", str(path), "-k", "family"]) == 0
    text = capsys.readouterr().out
    assert "host rtx: tcp://rtx.lan:2376, hardware rtx (cc 12.0), gpus 0, 1 slot(s)" in text


def test_plan_without_hosts_is_unchanged(tmp_path, capsys):
    from harness.cli import main

    path = tmp_path / "m.toml"
    path.write_text(BASE)
    assert main(["plan", "-m", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert set(rows[0]) == {"id", "stack", "model", "config", "quantization", "runner", "image"}


def test_an_engine_that_does_not_answer_is_named_with_its_host(tmp_path):
    from harness.engine import connect
    from harness.errors import EnvironmentProblem

    with pytest.raises(EnvironmentProblem) as info:
        connect(f"unix://{tmp_path}/no-such.sock", 3, name="spark")
    assert info.value.message == (f"host spark unreachable: no Docker engine answers at unix://{tmp_path}/no-such.sock: "
                                  "its socket does not exist (no dockerd is running)")
    assert "[hosts]" in info.value.hint


def test_an_ssh_engine_without_paramiko_says_what_to_install(monkeypatch):
    import sys

    from harness.engine import connect
    from harness.errors import EnvironmentProblem

    monkeypatch.setitem(sys.modules, "paramiko", None)  # import paramiko -> ImportError
    monkeypatch.delenv("DOCKER_SSH_CLIENT", raising=False)
    with pytest.raises(EnvironmentProblem) as info:
        connect("ssh://lab@spark.lan", name="spark")
    assert "ssh:// engine and paramiko is not installed" in info.value.message
    assert "vllm-bw-harness[ssh]" in info.value.hint and "DOCKER_SSH_CLIENT=1" in info.value.hint


def test_host_and_hosts_together_and_per_host_attach_modes_are_refused(tmp_path, capsys):
    from harness.cli import main

    base = (Path(__file__).resolve().parent.parent / "matrix" / "h200-local.toml").read_text()
    bad = base + '\n[host]\nnetwork = "host"\n\n[hosts.a]\ngpu_attach = "devices"\n'
    path = tmp_path / "m.toml"
    path.write_text(bad)
    assert main(["plan", "-m", str(path)]) == 2
    err = capsys.readouterr().err
    assert "[host] and [hosts] are both given" in err and "hosts.a.gpu_attach" in err
