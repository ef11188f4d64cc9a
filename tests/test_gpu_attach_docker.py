"""Each GPU attach mode, as the runner sends it, read back from the real engine.

The CI engine has no GPU, no NVIDIA runtime and no CDI spec, so no container is started: each is
CREATED (which stores the whole HostConfig) and `docker inspect`ed, then removed. 'runtime'
mode's check is the DeviceRequest in HostConfig (the toolkit would act on it at start).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from harness.engine import ContainerSpec, connect, create_kwargs
from harness.errors import ConfigError, EngineError
from harness.matrix.load import load_matrix
from harness.serve.base import ServeSpec
from harness.serve.docker import container_spec as runner_container_spec
from harness.serve.gpu_attach import port_free, require_port_free, serve_fields

BUSYBOX = "harness-test/busybox:latest"
DEVICES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


def matrix_text(host: str, serve: str = "") -> str:
    return f"""
[matrix]
name = "t"
hardware = "h"
[hardware.h]
cc = "9.0"
bandwidth_gbs = 4800
memory_gib = 141
[stacks.s]
image = "{BUSYBOX}"
[models.m]
checkpoint = "x/y"
quantization = "fp8"
active_params_b = 1
bytes_per_param = 1
[configs.auto]
[host]
{host}
[serve]
{serve}
"""


def load(tmp_path: Path, host: str, serve: str = ""):
    p = tmp_path / "m.toml"
    p.write_text(matrix_text(host, serve))
    return load_matrix(p)


def container_spec(matrix, run_id: str, port: int = 8000) -> ContainerSpec:
    """What DockerRunner sends for the ServeSpec the pipeline makes from this matrix."""
    attach = serve_fields(matrix)
    s = ServeSpec(cell_id="c", argv=("python3", "-m", "vllm.entrypoints.cli.main", "serve"), env=attach["env"],
                  port=port, log_path=Path("/dev/null"), labels={"harness.run-id": run_id},
                  image=BUSYBOX, mounts=attach["mounts"], gpus=attach["spec"]["gpus"],
                  **{k: v for k, v in attach["spec"].items() if k != "gpus"})
    return runner_container_spec(s)


@pytest.fixture
def run_id():
    return f"test-{uuid.uuid4().hex[:8]}"


def created(spec: ContainerSpec, tmp_path: Path) -> dict:
    engine = connect()
    c = engine.client.containers.create(**create_kwargs(spec))
    try:
        out = subprocess.run(["docker", "inspect", c.id], capture_output=True, text=True, check=True).stdout
        return json.loads(out)[0]
    finally:
        c.remove(force=True)


# --- the spec alone (no engine) -----------------------------------------------------------------


def test_devices_mode_fields(tmp_path):
    m = load(tmp_path, 'gpu_attach = "devices"\ndriver_dirs = ["/usr/local/nvidia"]\nnetwork = "host"\n'
                       'security_opt = ["seccomp=unconfined"]')
    f = serve_fields(m)
    assert f["spec"]["devices"] == tuple(f"{d}:{d}:rwm" for d in DEVICES)
    assert f["mounts"] == (("/usr/local/nvidia", "/usr/local/nvidia", "ro"),)
    assert f["env"] == {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/usr/local/nvidia/lib"}
    assert f["spec"]["network"] == "host" and f["spec"]["security_opt"] == ("seccomp=unconfined",)


def test_serve_network_overrides_host(tmp_path):
    m = load(tmp_path, 'network = "host"', 'network = "bridge"')
    assert serve_fields(m)["spec"]["network"] == "bridge"


def test_bad_mode_names_the_key(tmp_path):
    p = tmp_path / "m.toml"
    p.write_text(matrix_text('gpu_attach = "nvidia"'))
    with pytest.raises(ConfigError) as e:
        load_matrix(p)
    assert "host.gpu_attach" in str(e.value)


def test_devices_mode_needs_devices(tmp_path):
    m = load(tmp_path, 'gpu_attach = "devices"\ndevices = []')
    with pytest.raises(ConfigError, match=r"\[host\].devices"):
        serve_fields(m)


def test_busy_port_is_refused_before_start():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert not port_free(port)
        with pytest.raises(EngineError, match=f"port {port} is already in use"):
            require_port_free(port)


# --- on the real engine: created, inspected, removed --------------------------------------------


@pytest.mark.docker
def test_devices_mode_on_the_engine(tmp_path, run_id):
    m = load(tmp_path, 'gpu_attach = "devices"\ndriver_dirs = ["/usr/local/nvidia"]\nnetwork = "host"\n'
                       'security_opt = ["seccomp=unconfined"]')
    info = created(container_spec(m, run_id), tmp_path)
    hc = info["HostConfig"]
    assert [(d["PathOnHost"], d["PathInContainer"], d["CgroupPermissions"]) for d in hc["Devices"]] == \
        [(d, d, "rwm") for d in DEVICES]
    assert hc["Binds"] == ["/usr/local/nvidia:/usr/local/nvidia:ro"]
    assert hc["NetworkMode"] == "host"
    assert not hc.get("PortBindings")
    assert "seccomp=unconfined" in hc["SecurityOpt"]
    assert not hc.get("DeviceRequests")
    assert "LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib" in info["Config"]["Env"]
    assert info["Config"]["Labels"]["harness.run-id"] == run_id


@pytest.mark.docker
def test_runtime_mode_on_the_engine(tmp_path, run_id):
    m = load(tmp_path, 'gpu_attach = "runtime"', 'gpus = "0,1"')
    info = created(container_spec(m, run_id), tmp_path)
    hc = info["HostConfig"]
    assert [(r["Driver"], r["DeviceIDs"], r["Capabilities"]) for r in hc["DeviceRequests"]] == \
        [("", ["0", "1"], [["gpu"]])]
    assert not hc.get("Devices") and not hc.get("Binds")
    assert hc["NetworkMode"] in ("default", "bridge")
    assert hc["PortBindings"]["8000/tcp"][0]["HostIp"] == "127.0.0.1"


@pytest.mark.docker
def test_cdi_mode_on_the_engine(tmp_path, run_id):
    m = load(tmp_path, 'gpu_attach = "cdi"\ncdi_devices = ["nvidia.com/gpu=all"]')
    info = created(container_spec(m, run_id), tmp_path)
    hc = info["HostConfig"]
    assert [(r["Driver"], r["DeviceIDs"]) for r in hc["DeviceRequests"]] == [("cdi", ["nvidia.com/gpu=all"])]
    assert not hc.get("Devices")


@pytest.mark.docker
def test_no_container_left(run_id):
    out = subprocess.run(["docker", "ps", "-a", "-q", "--filter", f"label=harness.run-id={run_id}"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


# --- doctor: which mode works here, and why the others do not -----------------------------------


def engine_info(version="20.10.24", runtimes=("runc",), cdi=()):
    from harness.engine import EngineInfo

    return EngineInfo(host="unix:///x", version=version, api_version="1.41", os="Linux", runtimes=runtimes,
                      default_runtime="runc", cdi_spec_dirs=cdi, gpu_capable=False)


def test_doctor_rows_for_an_engine_without_toolkit(tmp_path):
    from harness.cli.doctor import attach_checks

    nodes = [tmp_path / "nvidia0", tmp_path / "nvidiactl"]
    for n in nodes:
        n.touch()
    drv = tmp_path / "drv"
    (drv / "lib64").mkdir(parents=True)
    (drv / "lib64" / "libcuda.so.1").touch()
    from harness.matrix.model import Host

    # stand-ins for /dev/nvidia*: a matrix file may name GPU nodes under /dev only, so the
    # [host] table is built directly here (doctor's checks take the table, not the file)
    host = Host.model_validate({"gpu_attach": "devices", "devices": [str(n) for n in nodes],
                                "driver_dirs": [str(drv)], "network": "host"})
    rows = {c.name: c for c in attach_checks(engine_info(), host, True, bridge=False)}
    assert rows["gpu attach: devices"].ok and rows["gpu attach: devices"].required
    assert not rows["gpu attach: runtime"].ok and not rows["gpu attach: runtime"].required
    assert "could not select device driver" in rows["gpu attach: runtime"].detail
    assert not rows["gpu attach: cdi"].ok and "< 25" in rows["gpu attach: cdi"].detail
    assert rows["network: host"].ok and "no bridge" in rows["network: host"].detail
    # the same host asking for 'runtime' and a bridge: both required, both fail with their fix
    m2 = load(tmp_path, 'gpu_attach = "runtime"')
    rows = {c.name: c for c in attach_checks(engine_info(), m2.spec.host, True, bridge=False)}
    assert rows["gpu attach: runtime"].required and "nvidia-ctk runtime configure" in rows["gpu attach: runtime"].fix
    assert not rows["network: bridge"].ok and 'network = "host"' in rows["network: bridge"].fix
    # devices with a node missing: named
    (nodes[1]).unlink()
    rows = {c.name: c for c in attach_checks(engine_info(), host, True)}
    assert not rows["gpu attach: devices"].ok and str(nodes[1]) in rows["gpu attach: devices"].detail


def test_doctor_cdi_needs_docker_25_and_a_spec(tmp_path):
    from harness.cli.doctor import attach_checks

    (tmp_path / "cdi").mkdir()
    (tmp_path / "cdi" / "nvidia.yaml").write_text("cdiVersion: 0.5.0\n")
    m = load(tmp_path, 'gpu_attach = "cdi"')
    rows = {c.name: c for c in attach_checks(engine_info("27.3.1", cdi=(str(tmp_path / "cdi"),)), m.spec.host, True)}
    assert rows["gpu attach: cdi"].ok and rows["gpu attach: cdi"].required
    rows = {c.name: c for c in attach_checks(engine_info("27.3.1", runtimes=("nvidia", "runc")), m.spec.host, True)}
    assert rows["gpu attach: runtime"].ok and not rows["gpu attach: cdi"].ok


# --- the pipeline's ServeSpec for a docker cell on such a host ----------------------------------


def test_pipeline_spec_for_host_network_and_devices(tmp_path):
    from harness.matrix.plan import expand
    from harness.serve.stage import plan

    m = load(tmp_path, 'gpu_attach = "devices"\ndriver_dirs = ["/usr/local/nvidia"]\nnetwork = "host"\n'
                       'security_opt = ["seccomp=unconfined"]', 'port = 8123\nvllm_cache = "/var/cache/vllm-h"')
    [cell] = expand(m)
    planned = plan(cell, m, run_id="rid", log_path=tmp_path / "log", image=BUSYBOX)
    spec, cmd = planned.spec, planned.command
    args = list(cmd.args)
    assert args[args.index("--host") + 1] == "127.0.0.1" and args[args.index("--port") + 1] == "8123"
    assert spec.network == "host" and spec.port == 8123 and spec.gpu_attach == "devices"
    assert spec.security_opt == ("seccomp=unconfined",)
    assert ("/usr/local/nvidia", "/usr/local/nvidia", "ro") in spec.mounts
    assert ("/var/cache/vllm-h", "/root/.cache/vllm", "rw") in spec.mounts
    assert spec.env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64:/usr/local/nvidia/lib"
    assert "# container: gpu_attach=devices network=host security_opt=seccomp=unconfined" in spec.header[-1]
    c = runner_container_spec(spec)
    assert c.network_mode == "host" and c.ports == {} and len(c.devices) == 4


def test_wheel_patch_applier(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("wheels_helper", Path(__file__).parent.parent / "docker" / "wheels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("a\nb\nc\nd\n")
    p = tmp_path / "p.patch"
    p.write_text("--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1,2 +1,2 @@\n c\n-d\n+D\n")  # stated at line 1, found at 3
    mod.apply_patch(str(tmp_path), str(p))
    assert (tmp_path / "pkg" / "m.py").read_text() == "a\nb\nc\nD\n"
    with pytest.raises(SystemExit):
        mod.apply_patch(str(tmp_path), str(p))  # 'd' is gone: the context no longer matches


def test_start_refusals_name_the_mode_to_use():
    from harness.engine import _start_hint

    assert "gpu_attach" in _start_hint('could not select device driver "" with capabilities: [[gpu]]', "runtime")
    assert "nvidia-ctk cdi generate" in _start_hint('could not select device driver "cdi" with capabilities: []', "cdi")
    assert "/dev/nvidia*" in _start_hint("error gathering device information while adding custom device "
                                         '"/dev/nvidia9": no such file or directory', "devices")


def test_doctor_prints_keys_as_written(capsys):
    from harness.cli.doctor import Check, render

    render([Check("gpu attach: devices", False, "missing device nodes: /dev/nvidia0",
                  "set [host].devices to the nodes this host has")])
    assert "[host].devices" in capsys.readouterr().out.replace("\n", " ").replace("│", " ")
