"""`harness lock` on the real engine against a real registry on localhost.

Debian's `docker-registry` (the CNCF distribution registry, 2.8) serves on 127.0.0.1:<free port>
with its own config and storage in a temp folder; the engine pushes to and pulls from
127.0.0.0/8 registries over plain HTTP by default. harness-test/busybox (tools/base-images.sh)
is pushed there, a matrix naming it is locked, and the locked digest must be the one the
registry itself serves for the tag. Then another image is pushed under the same tag and
locking again must fail naming the moved image; --update accepts it.
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from conftest import skip_or_fail_under_ci
from pypi_fake import FI_SDIST, VLLM_SDIST, pypi  # noqa: F401 - pypi is a fixture

from harness.cli import main
from harness.engine import connect
from harness.image.builder import build_stacks
from harness.image.stackbuild import resolve
from harness.matrix.load import load_matrix

pytestmark = [pytest.mark.docker]

BASE = "harness-test/busybox:latest"
TEMPLATE = Path(__file__).resolve().parent / "fixtures" / "build" / "Dockerfile.tiny.in"
MANIFEST_TYPES = ", ".join([
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
])


def _registry_binary() -> str:
    found = shutil.which("docker-registry")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "docker-registry"], capture_output=True,
                       timeout=600, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        found = shutil.which("docker-registry")
    if not found:
        skip_or_fail_under_ci("Debian's docker-registry is not installed and cannot be installed here "
                    "(needs root + apt: `apt-get install docker-registry`, or `make test` as root)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    binary = _registry_binary()
    root = tmp_path_factory.mktemp("registry")
    port = _free_port()
    (root / "config.yml").write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    log = (root / "registry.log").open("w")
    proc = subprocess.Popen([binary, "serve", str(root / "config.yml")], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(url + "/v2/", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail("docker-registry exited: " + (root / "registry.log").read_text()[-2000:])
                time.sleep(0.2)
        else:
            pytest.fail("docker-registry did not answer on " + url)
        yield f"127.0.0.1:{port}", url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


@pytest.fixture
def client():
    import docker

    c = docker.from_env(timeout=60)
    if not c.api.images(name=BASE.split(":")[0]):
        pytest.fail(f"{BASE} is missing: run tools/base-images.sh")
    return c


def served_digest(url: str, repo: str, tag: str) -> str:
    req = urllib.request.Request(f"{url}/v2/{repo}/manifests/{tag}", method="HEAD",
                                 headers={"Accept": MANIFEST_TYPES})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.headers["Docker-Content-Digest"]


def push(client, source: str, ref: str) -> None:
    repo, tag = ref.rsplit(":", 1)
    client.images.get(source).tag(repo, tag)
    for event in client.api.push(repo, tag=tag, stream=True, decode=True):
        assert "error" not in event, event


def other_image(client, tag: str) -> str:
    """busybox plus one label: another manifest, built offline by the engine's own builder."""
    dockerfile = f"FROM {BASE}\nLABEL harness.role=test harness.test=lock-moved-{tag}\n"
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=f"harness-test/moved:{tag}",
                                   labels={"harness.role": "test"}, rm=True)
    return image.id


MATRIX = """
[matrix]
name = "reg"
hardware = "h"
[hardware.h]
cc = "12.1"
bandwidth_gbs = 1
memory_gib = 1
[stacks.s]
torch_cuda_arch_list = "12.1a"
base_image = {{ repository = "{repo}", tag = "{tag}" }}
torch = {{ version = "0" }}
vllm = {{ pypi = "0.33.0", sdist_sha256 = "{sha}" }}
flashinfer = {{ version = "0.7.2.post1", sdist_sha256 = "{fsha}", cubin = false }}
[models.m]
checkpoint = "org/m"
quantization = "fp8"
active_params_b = 1
bytes_per_param = 1
[configs.c]
"""


@pytest.mark.usefixtures("pypi")
def test_lock_resolves_through_the_engine_and_notices_a_moved_tag(registry, client, tmp_path, capsys):
    host, url = registry
    tag = f"lock-{uuid.uuid4().hex[:8]}"
    repo = f"{host}/harness-test/busybox"
    ref = f"{repo}:{tag}"
    matrix = tmp_path / "reg.toml"
    matrix.write_text(MATRIX.format(repo=repo, tag=tag, sha=VLLM_SDIST, fsha=FI_SDIST))
    moved_id = built_ref = None
    try:
        push(client, BASE, ref)
        first = served_digest(url, "harness-test/busybox", tag)
        client.images.remove(ref)  # the lock must pull it, not find it

        assert main(["lock", "-m", str(matrix)]) == 0
        lock_text = (tmp_path / "reg.lock").read_text()
        assert f'digest = "{first}"' in lock_text
        assert 'source = "engine"' in lock_text

        # the build takes the locked digest (no --allow-unpinned: unlocked, it would refuse)
        engine = connect(timeout=10)
        builds = resolve(load_matrix(matrix), ["s"], engine=engine, template=TEMPLATE, template_values={"RUN_ID": tag})
        built = build_stacks(builds, engine=engine, log_dir=tmp_path / "logs", audit=False)["s"]
        built_ref = built.image_ref
        assert built.status == "built", built.log_tail
        assert built.labels["harness.base-image"] == f"{ref}@{first}"

        moved_id = other_image(client, tag)
        push(client, moved_id, ref)
        second = served_digest(url, "harness-test/busybox", tag)
        assert second != first
        capsys.readouterr()

        assert main(["lock", "-m", str(matrix)]) == 2
        err = " ".join(capsys.readouterr().err.split())  # rich wraps at 80 columns
        assert "stacks.s.base_image:" in err and ref in err and "now resolves to" in err
        assert "--update" in err
        assert f'digest = "{first}"' in (tmp_path / "reg.lock").read_text()  # unchanged

        assert main(["lock", "-m", str(matrix), "--update"]) == 0
        assert f'digest = "{second}"' in (tmp_path / "reg.lock").read_text()
    finally:
        _remove_registry_refs(client, host, f"harness-test/moved:{tag}", *([built_ref] if built_ref else []))


def _remove_registry_refs(client, host: str, *also: str) -> None:
    """Every tag and repo@digest reference this test gave an image (untagging only: the
    busybox image itself keeps its own name)."""
    refs = list(also)
    for image in client.api.images():  # one call: images.list() inspects each, racing removals
        refs += [r for r in (image.get("RepoTags") or []) + (image.get("RepoDigests") or []) if r.startswith(host + "/")]
    for r in refs:
        try:
            client.images.remove(r)
        except Exception:  # noqa: BLE001 - already gone is fine
            pass


@pytest.mark.usefixtures("pypi")
def test_a_pull_that_fails_is_one_line_naming_the_image(registry, tmp_path, capsys):
    host, _url = registry
    matrix = tmp_path / "reg.toml"
    matrix.write_text(MATRIX.format(repo=f"{host}/harness-test/not-there", tag="nope", sha=VLLM_SDIST,
                                    fsha=FI_SDIST))
    try:
        assert main(["lock", "-m", str(matrix)]) == 3
    finally:
        import docker

        _remove_registry_refs(docker.from_env(), host)
    err = " ".join(capsys.readouterr().err.split())
    assert f"cannot pull {host}/harness-test/not-there:nope:" in err
    assert not (tmp_path / "reg.lock").exists()

