"""`harness lock` without a registry: PyPI sha256 lookup against a local HTTP server answering in
PyPI's JSON shape (tests/pypi_fake.py), the lock file round trip, and every way a lock can stop
matching its matrix.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pypi_fake import FI_SDIST, RELEASES, VLLM_SDIST, FakePyPI, pypi  # noqa: F401 - pypi is a fixture
from support.builds import one

from harness import lock, platforms
from harness.cli import main
from harness.errors import ConfigError
from harness.image.dockerfile import render
from harness.matrix.load import load_matrix

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


class Engine:
    """A stand-in for the engine's pull: the registry test does the real one."""

    def __init__(self, digests: dict[str, str]) -> None:
        self.digests = digests
        self.pulled: list[str] = []

    def pull_digest(self, repository: str, tag: str) -> str:
        self.pulled.append(f"{repository}:{tag}")
        return self.digests[f"{repository}:{tag}"]


MATRIX = """
[matrix]
name = "t"
hardware = "h"
[hardware.h]
cc = "12.1"
bandwidth_gbs = 1
memory_gib = 1
[stacks.a]
torch_cuda_arch_list = "12.1a"
base_image = {{ repository = "example/cuda", tag = "{tag}"{digest} }}
torch = {{ version = "2.14.0" }}
vllm = {{ pypi = "0.33.0"{vllm_sha} }}
flashinfer = {{ version = "0.7.2.post1", cubin = false }}
[stacks.b]
torch_cuda_arch_list = "12.1a"
base_image = {{ repository = "example/cuda", tag = "{tag}" }}
torch = {{ version = "2.14.0" }}
vllm = {{ pypi = "0.33.0" }}
flashinfer = {{ version = "0.7.2.post1", cubin = false }}
{extra}
[models.m]
checkpoint = "org/m"
quantization = "fp8"
active_params_b = 1
bytes_per_param = 1
[configs.c]
"""


def write_matrix(tmp_path: Path, tag="13.0.1", digest=None, vllm_sha=None, extra="") -> Path:
    path = tmp_path / "t.toml"
    path.write_text(MATRIX.format(tag=tag, digest=f', digest = "{digest}"' if digest else "",
                                  vllm_sha=f', sdist_sha256 = "{vllm_sha}"' if vllm_sha else "",
                                  extra=extra))
    return path


# --- PyPI ------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("pypi")
def test_sdist_sha256_comes_from_pypi_json_with_the_project_fallback():
    files = lock.pypi_files("vllm", "0.33.0")
    assert lock.pick_file(files, "vllm", "0.33.0", "sdist").digests.sha256 == VLLM_SDIST
    # the per-version URL was asked first, and its 404 sent us to the project document
    assert FakePyPI.seen == ["/pypi/vllm/0.33.0/json", "/pypi/vllm/json"]


@pytest.mark.parametrize("project, version, kind, arch, want", [
    ("vllm", "0.33.0", "wheel", "x86_64", "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"),
    ("vllm", "0.33.0", "wheel", "aarch64", "vllm-0.33.0-cp38-abi3-manylinux_2_28_aarch64.whl"),
    ("flashinfer-python", "0.7.2.post1", "wheel", "aarch64", "flashinfer_python-0.7.2.post1-py3-none-any.whl"),
    ("flashinfer-python", "0.7.2.post1", "sdist", "x86_64", "flashinfer_python-0.7.2.post1.tar.gz"),
])
@pytest.mark.usefixtures("pypi")
def test_the_right_file_is_picked(project, version, kind, arch, want):
    files = lock.pypi_files(project, version)
    assert lock.pick_file(files, project, version, kind, platforms.parse(arch)).filename == want


@pytest.mark.usefixtures("pypi")
def test_a_version_pypi_does_not_have_is_named():
    # flashinfer-cubin has no 0.7.x release: what the shipped matrices used to ask for
    with pytest.raises(ConfigError, match=r"flashinfer-cubin 0.7.2.post1 is not on PyPI") as exc:
        lock.pypi_files("flashinfer-cubin", "0.7.2.post1")
    assert "latest: 0.6.13" in exc.value.hint


def test_a_per_version_answer_is_used_when_there_is_one():
    asked = []

    def fetch(url):
        asked.append(url)
        return {"urls": RELEASES["vllm"]["0.33.0"]}

    files = lock.pypi_files("vllm", "0.33.0", fetch=fetch)
    assert asked == ["https://pypi.org/pypi/vllm/0.33.0/json"]  # the production URL
    assert len(files) == 3


# --- locking and applying ----------------------------------------------------------------------------


@pytest.mark.usefixtures("pypi")
def test_lock_pins_every_stack_and_the_build_uses_it(tmp_path, default_sources):
    m = load_matrix(write_matrix(tmp_path))
    eng = Engine({"example/cuda:13.0.1": DIGEST_A})
    said = []
    locked = lock.locked_matrix(m, lock_if_missing=True, say=said.append, engine_factory=lambda: eng)
    assert eng.pulled == ["example/cuda:13.0.1"]  # one pull for the two stacks sharing it
    assert (tmp_path / "t.lock").is_file()
    assert any("pinned stacks.a.base_image: example/cuda:13.0.1 -> " + DIGEST_A in s for s in said)
    a = locked.spec.stacks["a"]
    assert a.base_image.digest == DIGEST_A
    assert a.vllm.sdist_sha256 == VLLM_SDIST and a.flashinfer.sdist_sha256 == FI_SDIST
    # what the image is built FROM carries the locked digest
    assert render(one(locked, "a")).buildargs["BASE_IMAGE"] == f"example/cuda:13.0.1@{DIGEST_A}"
    # a second use reads the lock: no pull
    again = lock.locked_matrix(load_matrix(tmp_path / "t.toml"), lock_if_missing=True,
                               engine_factory=lambda: pytest.fail("the lock exists: no engine"))
    assert again.spec.stacks["b"].base_image.digest == DIGEST_A


@pytest.mark.usefixtures("pypi")
def test_lock_file_says_what_each_entry_pins_and_when(tmp_path):
    m = load_matrix(write_matrix(tmp_path))
    lk = lock.resolve(m, engine_factory=lambda: Engine({"example/cuda:13.0.1": DIGEST_A}))
    lock.write_lock(lk, tmp_path / "t.lock")
    text = (tmp_path / "t.lock").read_text()
    assert text.startswith("# Written by `harness lock -m ")
    back = lock.read_lock(tmp_path / "t.lock")
    assert back == lk
    img = back.stacks["a"].base_image
    assert (img.reference, img.digest, img.source) == ("example/cuda:13.0.1", DIGEST_A, "engine")
    assert img.locked.endswith("Z")
    assert back.stacks["a"].vllm.file == "vllm-0.33.0.tar.gz"


@pytest.mark.parametrize("edit, named", [
    (dict(tag="13.0.2"), "stacks.a.base_image: the matrix asks for example/cuda:13.0.2; the lock pinned example/cuda:13.0.1"),
    (dict(digest=DIGEST_B), f"stacks.a.base_image.digest: the matrix says {DIGEST_B}; the lock says {DIGEST_A}"),
    (dict(vllm_sha="0" * 64), "stacks.a.vllm.sdist_sha256: the matrix says " + "0" * 64),
    (dict(extra='[stacks.c]\ntorch_cuda_arch_list = "12.1a"\nbase_image = { repository = "x/y", tag = "1" }\n'
                'torch = { version = "2" }\nvllm = { pypi = "0.33.0" }\nflashinfer = { version = "0.7.2.post1" }\n'),
     "stacks.c.base_image: x/y:1 is not in the lock"),
])
@pytest.mark.usefixtures("pypi")
def test_a_lock_that_no_longer_matches_names_what_moved_and_the_fix(tmp_path, edit, named):
    m = load_matrix(write_matrix(tmp_path))
    lock.write_lock(lock.resolve(m, engine_factory=lambda: Engine({"example/cuda:13.0.1": DIGEST_A})),
                    tmp_path / "t.lock")
    edited = load_matrix(write_matrix(tmp_path, **edit))
    with pytest.raises(lock.Moved) as exc:
        lock.locked_matrix(edited, lock_if_missing=True)
    assert named in str(exc.value)
    assert "harness lock -m " in exc.value.hint and exc.value.exit_code == 2


@pytest.mark.usefixtures("pypi")
def test_a_matrix_digest_wins_and_is_recorded_without_a_pull(tmp_path):
    m = load_matrix(write_matrix(tmp_path, digest=DIGEST_B))
    lk = lock.resolve(m, engine_factory=lambda: Engine({"example/cuda:13.0.1": DIGEST_A}))
    assert lk.stacks["a"].base_image.digest == DIGEST_B
    assert lk.stacks["a"].base_image.source == "matrix"
    assert lk.stacks["b"].base_image.digest == DIGEST_A  # b wrote none: the engine's answer
    assert lock.apply_lock(m, lk).spec.stacks["a"].base_image.digest == DIGEST_B


@pytest.mark.usefixtures("pypi")
def test_a_wrong_sha256_in_the_matrix_is_refused_when_locking(tmp_path):
    m = load_matrix(write_matrix(tmp_path, vllm_sha="1" * 64))
    with pytest.raises(ConfigError, match=r"stacks.a.vllm.sdist_sha256: 1{64} is not the sha256"):
        lock.resolve(m, engine_factory=lambda: Engine({"example/cuda:13.0.1": DIGEST_A}))


@pytest.mark.usefixtures("pypi")
def test_relocking_when_the_tag_moved_fails_until_update(tmp_path):
    m = load_matrix(write_matrix(tmp_path))
    first = lock.resolve(m, engine_factory=lambda: Engine({"example/cuda:13.0.1": DIGEST_A}))
    moved = Engine({"example/cuda:13.0.1": DIGEST_B})
    with pytest.raises(lock.Moved) as exc:
        lock.resolve(m, engine_factory=lambda: moved, previous=first)
    assert f"stacks.a.base_image: example/cuda:13.0.1 now resolves to {DIGEST_B}; the lock has {DIGEST_A}" \
        in str(exc.value)
    assert "--update" in exc.value.hint
    accepted = lock.resolve(m, engine_factory=lambda: moved, previous=first, update=True)
    assert accepted.stacks["a"].base_image.digest == DIGEST_B


@pytest.mark.usefixtures("pypi")
def test_an_edited_pin_is_relocked_without_complaint(tmp_path):
    m = load_matrix(write_matrix(tmp_path))
    first = lock.resolve(m, engine_factory=lambda: Engine({"example/cuda:13.0.1": DIGEST_A}))
    edited = load_matrix(write_matrix(tmp_path, tag="13.0.2"))
    again = lock.resolve(edited, engine_factory=lambda: Engine({"example/cuda:13.0.2": DIGEST_B}),
                         previous=first)
    assert again.stacks["a"].base_image.reference == "example/cuda:13.0.2"


def test_a_broken_lock_is_bad_input_named(tmp_path):
    (tmp_path / "t.lock").write_text("[lock]\nformat = 1\n")
    with pytest.raises(ConfigError, match=r"t.lock: not a lock this version can read") as exc:
        lock.read_lock(tmp_path / "t.lock")
    assert "harness lock -m" in exc.value.hint


def test_no_lock_and_no_locking_leaves_the_build_to_refuse(tmp_path):
    m = load_matrix(write_matrix(tmp_path))
    assert lock.locked_matrix(m) is m


def test_local_only_matrix_needs_no_lock(root, capsys):
    assert main(["lock", "-m", str(root / "matrix" / "h200-local.toml")]) == 0
    assert "nothing to lock" in capsys.readouterr().out
    assert not (root / "matrix" / "h200-local.lock").exists()


@pytest.mark.usefixtures("pypi")
def test_lock_command_writes_and_checks(tmp_path, monkeypatch, capsys):
    path = write_matrix(tmp_path, digest=DIGEST_A)
    text = path.read_text().replace('base_image = { repository = "example/cuda", tag = "13.0.1" }',
                                    f'base_image = {{ repository = "example/cuda", tag = "13.0.1", digest = "{DIGEST_A}" }}')
    path.write_text(text)  # every image pinned in the matrix: the command needs no engine
    assert main(["lock", "-m", str(path)]) == 0
    out = capsys.readouterr().out
    assert "stacks.b.vllm: vllm-0.33.0.tar.gz sha256 " + VLLM_SDIST in out
    assert main(["lock", "-m", str(path), "--check"]) == 0
    path.write_text(text.replace('pypi = "0.33.0" }\nflashinfer', 'pypi = "0.33.0", sdist_sha256 = "'
                                 + VLLM_SDIST + '" }\nflashinfer', 1))
    assert main(["lock", "-m", str(path), "--check"]) == 0  # the same value written in the matrix


@pytest.mark.usefixtures("pypi")
def test_run_refuses_a_stale_lock_before_anything_starts(tmp_path, capsys):
    m = load_matrix(write_matrix(tmp_path))
    lock.write_lock(lock.resolve(m, engine_factory=lambda: Engine({"example/cuda:13.0.1": DIGEST_A})),
                    tmp_path / "t.lock")
    write_matrix(tmp_path, tag="13.0.2")
    results = tmp_path / "results"
    assert main(["run", "-m", str(tmp_path / "t.toml"), "--results", str(results)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "stacks.a.base_image: the matrix asks for example/cuda:13.0.2" in err
    assert "fix: `harness lock -m " in err
    assert not results.exists()  # refused: no run directory marked interrupted


@pytest.mark.usefixtures("pypi")
def test_pypi_answers_go_through_harness_http_with_its_retries(monkeypatch):
    # a 503 is a transient failure harness.http retries (lock had its own client without retries)
    busy = {"left": 1}
    answer = FakePyPI.do_GET

    def flaky(handler):
        if busy["left"]:
            busy["left"] -= 1
            handler._send(503, {"message": "busy"})
            return
        answer(handler)

    monkeypatch.setattr(FakePyPI, "do_GET", flaky)
    files = lock.pypi_files("vllm", "0.33.0")
    assert busy["left"] == 0 and VLLM_SDIST in {f.digests.sha256 for f in files}
    # plain http to anything but this loopback test server is refused, as for every download
    with pytest.raises(ConfigError, match="only https://"):
        lock.get_json("http://pypi.example/pypi/vllm/json")


# --- the platform a lock is written for ----------------------------------------------------------


@pytest.mark.usefixtures("pypi")
def test_a_lock_records_its_platform_this_hosts_by_default(tmp_path):
    m = load_matrix(write_matrix(tmp_path))
    lk = lock.resolve(m, engine_factory=lambda: Engine({"example/cuda:13.0.1": DIGEST_A}))
    assert lk.lock.platform == platforms.host().docker
    arm = lock.resolve(m, engine_factory=lambda: Engine({"example/cuda:13.0.1": DIGEST_A}),
                       platform=platforms.ARM64)
    lock.write_lock(arm, tmp_path / "t.lock")
    assert 'platform = "linux/arm64"' in (tmp_path / "t.lock").read_text()
    assert lock.read_lock(tmp_path / "t.lock").lock.platform == "linux/arm64"
    # sdists and the base image's digest are the same on every CPU: the same pins
    assert {k: v.model_dump(exclude={"locked"}) for k, v in arm.stacks["a"].items()} == \
        {k: v.model_dump(exclude={"locked"}) for k, v in lk.stacks["a"].items()}


@pytest.mark.usefixtures("pypi")
def test_an_arm64_host_picks_the_aarch64_wheel_and_never_another_cpus(monkeypatch):
    files = lock.pypi_files("vllm", "0.33.0")
    monkeypatch.setattr(platforms._platform, "machine", lambda: "aarch64")  # what uname says on a Spark
    assert lock.pick_file(files, "vllm", "0.33.0", "wheel").filename.endswith("_aarch64.whl")
    only_x86 = [f for f in files if not f.filename.endswith("_aarch64.whl")]
    with pytest.raises(ConfigError, match=r"vllm 0.33.0 has no wheel for linux/arm64 \(aarch64\) on PyPI"):
        lock.pick_file(only_x86, "vllm", "0.33.0", "wheel")


def _with_cubin_pin(lk: lock.LockFile, file: str) -> lock.LockFile:
    """The lock with a flashinfer-cubin pin on stack a, the only wheel a lock pins. PyPI's cubin
    wheels are pure; the CPU-tagged file name given here is made up, to stand for a wheel that
    is not."""
    pin = lock.LockedFile(project="flashinfer-cubin", version="0.7.2.post1", kind="wheel", file=file,
                          sha256="c" * 64, source="pypi", locked="2026-12-02T00:00:00Z")
    return lk.model_copy(update={"stacks": {**lk.stacks, "a": lk.stacks["a"].model_copy(update={"flashinfer_cubin": pin})}})


@pytest.mark.usefixtures("pypi")
def test_a_wheel_locked_for_another_cpu_is_a_mismatch_naming_both(tmp_path):
    lk = lock.resolve(load_matrix(write_matrix(tmp_path)), platform=platforms.AMD64,
                      engine_factory=lambda: Engine({"example/cuda:13.0.1": DIGEST_A}))
    path = tmp_path / "t.toml"
    path.write_text(path.read_text().replace("cubin = false }\n[stacks.b]", "cubin = true }\n[stacks.b]", 1))
    m = load_matrix(path)  # stack a now takes the cubin wheel
    x86 = _with_cubin_pin(lk, "flashinfer_cubin-0.7.2.post1-py3-none-manylinux_2_28_x86_64.whl")
    assert lock.mismatches(m, x86, platform=platforms.AMD64) == []
    problems = lock.mismatches(m, x86, platform=platforms.ARM64)
    assert problems == ["stacks.a.flashinfer-cubin: the lock (written for linux/amd64) pinned "
                        "flashinfer_cubin-0.7.2.post1-py3-none-manylinux_2_28_x86_64.whl is built for x86_64, "
                        "not linux/arm64 (aarch64): lock again with --platform linux/arm64"]
    with pytest.raises(lock.Moved):
        lock.apply_lock(m, x86, platform=platforms.ARM64)
    pure = _with_cubin_pin(lk, "flashinfer_cubin-0.7.2.post1-py3-none-any.whl")
    assert lock.mismatches(m, pure, platform=platforms.ARM64) == []  # a pure wheel suits every CPU


@pytest.mark.usefixtures("pypi")
def test_lock_command_takes_a_platform(tmp_path, capsys):
    path = write_matrix(tmp_path, digest=DIGEST_A)
    path.write_text(path.read_text().replace('tag = "13.0.1" }', f'tag = "13.0.1", digest = "{DIGEST_A}" }}'))
    assert main(["lock", "-m", str(path), "--platform", "linux/arm64"]) == 0
    assert lock.read_lock(tmp_path / "t.lock").lock.platform == "linux/arm64"
    assert main(["lock", "-m", str(path), "--platform", "aarch64", "--check"]) == 0
    capsys.readouterr()
    assert main(["lock", "-m", str(path), "--platform", "linux/s390x"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--platform: unknown platform 'linux/s390x'" in err and "linux/arm64" in err


def test_locking_again_for_another_cpu_picks_its_wheel_without_calling_it_moved(tmp_path):
    """A cubin wheel per CPU (made up: PyPI's are pure), served through `fetch`."""
    cubin = [{"filename": f"flashinfer_cubin-0.7.2.post1-py3-none-manylinux_2_28_{p.machine}.whl",
              "packagetype": "bdist_wheel", "digests": {"sha256": c * 64}}
             for p, c in ((platforms.AMD64, "d"), (platforms.ARM64, "e"))]

    def fetch(url):
        name = url.split("/pypi/")[1].split("/")[0]
        return {"urls": cubin if name == "flashinfer-cubin" else RELEASES[name][sorted(RELEASES[name])[-1]]}

    eng = lambda: Engine({"example/cuda:13.0.1": DIGEST_A})  # noqa: E731
    path = write_matrix(tmp_path)
    path.write_text(path.read_text().replace("cubin = false", "cubin = true"))
    m = load_matrix(path)
    amd = lock.resolve(m, engine_factory=eng, fetch=fetch, platform=platforms.AMD64)
    assert amd.stacks["a"].flashinfer_cubin.file.endswith("_x86_64.whl")
    # the file keeps the table's name as the build reads it, and reads back to the same pins
    lock.write_lock(amd, tmp_path / "cubin.lock")
    assert "[stacks.a.flashinfer-cubin]" in (tmp_path / "cubin.lock").read_text()
    assert lock.read_lock(tmp_path / "cubin.lock") == amd
    arm = lock.resolve(m, engine_factory=eng, fetch=fetch, platform=platforms.ARM64, previous=amd)  # no Moved
    assert arm.stacks["a"].flashinfer_cubin.sha256 == "e" * 64 and arm.lock.platform == "linux/arm64"
    cubin[0]["digests"]["sha256"] = "f" * 64  # the x86_64 wheel replaced upstream: that is a move
    with pytest.raises(lock.Moved, match="flashinfer-cubin"):
        lock.resolve(m, engine_factory=eng, fetch=fetch, platform=platforms.AMD64, previous=amd)
