"""A bundle installed for real on linux/arm64 (a DGX Spark's CPU), emulated: an arm64 container
(tools/arm64-image.sh: Debian bookworm arm64, its Python without pip) runs `harness bundle install`
from this checkout. The wheel is a real one from PyPI with a compiled module (markupsafe 3.0.3
cp311, for each CPU). The arm64 bundle installs and its aarch64 module imports there; the amd64
bundle is refused naming both platforms, and leaves no .so behind, with or without the platform
recorded in the bundle; a wheel stack's in-image install (docker/wheels.py) refuses its wheel too.
A Docker kit made on x86-64 is refused there by tools/device-docker-up.sh."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
from conftest import skip_or_fail_under_ci

from harness import bundle, platforms

pytestmark = pytest.mark.docker
IMAGE = "harness-test/arm64:bookworm"
ROOT = Path(__file__).resolve().parent.parent
EM_AARCH64 = 183  # ELF e_machine of an aarch64 object
HANDLER = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")
ARM64 = "HARNESS_REQUIRE_ARM64"  # CI's switch: these tests must run there, not skip


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    """The image's markupsafe wheels for both CPUs, copied out (a created container, removed)."""
    # the handler first: without it the image cannot be built, and what to do differs
    if not HANDLER.exists() or not HANDLER.read_text().startswith("enabled"):
        skip_or_fail_under_ci("the kernel has no aarch64 handler: run tools/arm64-image.sh --register as root "
                              "(after apt-get install -y qemu-user-static binfmt-support)", ARM64)
    if docker("image", "inspect", IMAGE, check=False).returncode != 0:
        skip_or_fail_under_ci(f"{IMAGE} missing: run tools/arm64-image.sh (`make test-deps` does)", ARM64)
    dest = tmp_path_factory.mktemp("wheels")
    cid = docker("create", "--platform", "linux/arm64", IMAGE, "true").stdout.strip()
    try:
        docker("cp", f"{cid}:/opt/wheels/.", str(dest))
    finally:
        docker("rm", cid)
    return dest


def make(tmp_path: Path, wheels: Path, p: platforms.Platform, *, recorded: bool = True) -> Path:
    spec = tmp_path / "spec.toml"
    spec.write_text('name = "ms"\nrequirements = ["markupsafe==3.0.3"]\n')
    out = tmp_path / f"bundle-{p.short}{'' if recorded else '-old'}"
    bundle.make(spec, out, downloaded=wheels / p.short, platform=p)
    if not recorded:  # as bundles made before the platform was recorded
        m = json.loads((out / "bundle.json").read_text())
        del m["platform"], m["lock"]["platform"]
        (out / "bundle.json").write_text(json.dumps(m))
    return out


SCRIPT = r"""
exec 2>&1
echo "uname $(uname -m)"
python3 -m pip --version >/dev/null 2>&1 && echo "pip present" || echo "no pip"
run() { echo "+ $*"; python3 -m harness "$@"; echo "rc=$?"; }
run bundle install /b/arm64 --dest /tmp/wh --site /tmp/site
python3 - <<'EOF'
import sys
sys.path.insert(0, "/tmp/site")
import markupsafe, markupsafe._speedups as s
print("escaped", markupsafe.escape("<a>"), "speedups e_machine", int.from_bytes(open(s.__file__, "rb").read(20)[18:20], "little"))
EOF
run bundle install /b/amd64 --dest /tmp/wh2 --site /tmp/site2
run bundle install /b/amd64 --dest /tmp/wh3 --platform linux/amd64 --site /tmp/site3
run bundle install /b/amd64-old --dest /tmp/wh4 --site /tmp/site4
echo "+ wheels.py install"  # a wheel stack's install step in an arm64 image, given the amd64 wheelhouse
python3 /src/docker/wheels.py install --python python3 --vllm 0 --wheelhouse /tmp/wh3; echo "rc=$?"
purelib=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "so left: $(find /tmp/site2 /tmp/site3 /tmp/site4 "$purelib" -name 'markupsafe*' 2>/dev/null | wc -l) ($purelib)"
"""


def test_an_arm64_bundle_installs_on_arm64_and_an_amd64_one_is_refused(tmp_path, wheels):
    for p, recorded in ((platforms.ARM64, True), (platforms.AMD64, True), (platforms.AMD64, False)):
        b = make(tmp_path, wheels, p, recorded=recorded)
        (tmp_path / "b").mkdir(exist_ok=True)
        b.rename(tmp_path / "b" / b.name.removeprefix("bundle-"))
    name = f"harness-test-arm64-{uuid.uuid4().hex[:8]}"
    r = docker("run", "--rm", "--name", name, "--platform", "linux/arm64", "--network", "none",
               "-v", f"{ROOT}/harness:/src/harness:ro", "-v", f"{ROOT}/docker:/src/docker:ro", "-v", f"{tmp_path / 'b'}:/b:ro",
               "-e", "PYTHONPATH=/src:/opt/harness-deps", "-e", "COLUMNS=400", IMAGE, "bash", "-c", SCRIPT,
               check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "uname aarch64" in out and "no pip" in out
    # the arm64 bundle: installed by unpacking (no pip), and its aarch64 module imports
    assert "installed 1 wheels into /tmp/site" in out
    assert f"escaped &lt;a&gt; speedups e_machine {EM_AARCH64}" in out
    sections = out.split("+ bundle install ")
    amd, amd_unpacked, old = sections[2], sections[3], sections[4]
    # the amd64 bundle: refused before unpacking, naming both platforms
    assert "bundle.json: made for linux/amd64 (x86_64); this is linux/arm64 (aarch64)" in " ".join(amd.split())
    assert "rc=2" in amd and "installed" not in amd
    # unpacked for an amd64 image build it is fine, but not into this Python's site
    assert "wheels for linux/amd64 in /tmp/wh3" in amd_unpacked
    assert "wheels.lock: made for linux/amd64 (x86_64); this is linux/arm64 (aarch64)" in " ".join(amd_unpacked.split())
    assert "rc=2" in amd_unpacked and "installed" not in amd_unpacked
    # a bundle with no platform recorded: its wheel's tag decides
    assert ("markupsafe-3.0.3-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl "
            "is built for x86_64, not linux/arm64 (aarch64)") in " ".join(old.split())
    assert "rc=2" in old
    stack = out.split("+ wheels.py install")[1]
    assert ("this image's Python runs on aarch64; the wheelhouse (linux/amd64) holds wheels for another CPU: "
            "markupsafe-3.0.3-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl "
            "is built for x86_64") in stack and "rc=1" in stack
    assert "so left: 0 (/usr/local/lib/python3.11/dist-packages)" in out  # no site holds markupsafe


def test_a_docker_kit_made_on_x86_64_is_refused_on_arm64(tmp_path, wheels):
    """tools/device-docker-up.sh on an arm64 host, given a kit whose MACHINE says x86_64 (as
    tools/make-docker-kit.sh records it on an x86-64 machine): refused, named, nothing started."""
    import io
    import tarfile

    kit = tmp_path / "docker-kit.tar.xz"
    with tarfile.open(kit, "w:xz") as t:
        for name, data in (("MACHINE", b"x86_64\n"), ("bin/dockerd", b"#!/bin/sh\necho started\n")):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            t.addfile(info, io.BytesIO(data))
    r = docker("run", "--rm", "--platform", "linux/arm64", "--network", "none",
               "-v", f"{ROOT}/tools:/t:ro", "-v", f"{kit}:/kit.tar.xz:ro", IMAGE,
               "bash", "-c", "bash /t/device-docker-up.sh /kit.tar.xz; echo rc=$?; ls /tmp/dk 2>&1 | head -1",
               check=False)
    out = " ".join((r.stdout + r.stderr).split())
    assert "/kit.tar.xz is for x86_64, this host is aarch64: make the kit (tools/make-docker-kit.sh) on a " \
           "aarch64 machine" in out
    assert "rc=2" in out and "started" not in out and "No such file or directory" in out  # /tmp/dk removed
