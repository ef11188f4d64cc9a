"""The Docker module against a real engine: build from a generated context, run, read logs, clean."""

from __future__ import annotations

import io
import tarfile
import uuid

import pytest

from harness.engine import ContainerSpec, connect
from harness.errors import BuildFailed, EngineError

pytestmark = pytest.mark.docker

BUSYBOX = "harness-test/busybox:latest"


def context(dockerfile: str, files: dict[str, bytes] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in {"Dockerfile": dockerfile.encode(), **(files or {})}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def engine():
    return connect()


@pytest.fixture
def run_id():
    return f"test-{uuid.uuid4().hex[:8]}"


def test_build_run_logs_and_cleanup(engine, run_id):
    tag = f"harness-test/tiny:{run_id}"
    lines: list[str] = []
    labels = {"harness.run-id": run_id, "harness.role": "test"}
    image_id = engine.build(
        context(f"FROM {BUSYBOX}\nCOPY hello.txt /hello.txt\nCMD [\"cat\", \"/hello.txt\"]\n",
                {"hello.txt": b"hello from the harness\n"}),
        tag, labels=labels, on_line=lines.append)
    try:
        assert image_id.startswith("sha256:")
        assert engine.image_labels(tag) == labels
        assert any("Step 2/3" in line or "COPY hello.txt" in line for line in lines), lines
        spec = ContainerSpec(image=tag, labels=tuple(labels.items()))
        with engine.container(spec) as c:
            for _ in range(50):
                if c.state().status == "exited":
                    break
                import time

                time.sleep(0.1)
            assert c.state().exit_code == 0
            assert "hello from the harness" in c.logs()
            assert engine.containers({"harness.run-id": run_id})
        assert engine.containers({"harness.run-id": run_id}) == []
    finally:
        engine.remove_image(tag)
    assert engine.image_labels(tag) is None


def test_labels_are_one_step_and_arrive_exactly(engine, run_id):
    # every label in one LABEL instruction (the API's own labels cost the legacy builder a step
    # each); quotes, backslashes, `$`, spaces and non-ASCII survive as given
    tag = f"harness-test/tiny:{run_id}"
    labels = {"harness.role": "test-image", "harness.test": run_id,
              "harness.odd": 'a "quoted" \\ back$lash $HOME ${X:-y} ünï',
              **{f"harness.n{i:02d}": f"value {i}" for i in range(25)}}
    lines: list[str] = []
    try:
        engine.build(context(f"FROM {BUSYBOX}\nARG X=1\nRUN echo built\n", {"data.txt": b"x"}), tag,
                     labels=labels, on_line=lines.append)
        assert engine.image_labels(tag) == labels
        steps = [ln for ln in lines if ln.startswith("Step ")]
        assert len(steps) == 4 and steps[-1].split(" : ", 1)[1].startswith("LABEL "), steps
    finally:
        engine.remove_image(tag)
    with pytest.raises(EngineError, match="line break"):
        engine.build(context(f"FROM {BUSYBOX}\n"), tag, labels={"harness.bad": "two\nlines"})


def test_failed_step_reports_tail_and_leaves_no_container(engine, run_id):
    tag = f"harness-test/broken:{run_id}"
    with pytest.raises(BuildFailed) as info:
        engine.build(context(f"FROM {BUSYBOX}\nRUN echo about-to-fail && exit 7\n"), tag,
                     labels={"harness.run-id": run_id})
    assert "returned a non-zero code: 7" in info.value.message
    assert any("about-to-fail" in line for line in info.value.log_tail)
    # forcerm: the failed step's container is gone too
    leftovers = engine.client.containers.list(all=True, filters={"ancestor": BUSYBOX})
    assert [c for c in leftovers if "exit 7" in " ".join(c.attrs["Config"].get("Cmd") or [])] == []


def test_container_removed_when_block_raises(engine, run_id):
    spec = ContainerSpec(image=BUSYBOX, command=("sleep", "30"), labels=(("harness.run-id", run_id),))
    with pytest.raises(RuntimeError):
        with engine.container(spec):
            assert engine.containers({"harness.run-id": run_id})
            raise RuntimeError("cell failed")
    assert engine.containers({"harness.run-id": run_id}) == []


def test_gpu_request_without_nvidia_runtime_fails_clearly_and_cleans_up(engine, run_id):
    if engine.info().gpu_capable:
        pytest.skip("this engine has a GPU runtime")
    from harness.errors import EngineError

    spec = ContainerSpec(image=BUSYBOX, command=("true",), gpus="all", labels=(("harness.run-id", run_id),))
    with pytest.raises(EngineError) as info:
        with engine.container(spec):
            pass
    assert "NVIDIA Container Toolkit" in (info.value.hint or "")
    assert engine.containers({"harness.run-id": run_id}) == []


def test_listing_and_reaping_survive_a_container_removed_meanwhile(engine, run_id, monkeypatch):
    """A shared engine: another run may remove a container between our list and our remove.
    Listing takes one call (no per-container inspect that could raise NotFound), and a
    container already gone when reap removes it is skipped, not an error."""
    import docker

    from harness.labels import RUN_ID as LABEL_RUN

    client = engine.client
    made = [client.containers.create(BUSYBOX, ["true"], labels={LABEL_RUN: run_id}, name=f"{run_id}-{i}")
            for i in range(2)]
    try:
        assert sorted(engine.containers({LABEL_RUN: run_id})) == [f"{run_id}-0", f"{run_id}-1"]
        real_remove = client.api.remove_container

        def remove_gone_first(container, **kw):
            if container == made[0].id:  # another run got there first
                real_remove(container, **kw)
                raise docker.errors.NotFound("No such container")
            return real_remove(container, **kw)

        monkeypatch.setattr(client.api, "remove_container", remove_gone_first)
        assert engine.reap(run_id=run_id) == [f"{run_id}-1"]
        assert engine.containers({LABEL_RUN: run_id}) == []
    finally:
        for c in made:
            try:
                c.remove(force=True)
            except docker.errors.NotFound:
                pass


def test_engine_answers_are_read_once_keeping_every_key_and_a_bad_one_is_named(engine, monkeypatch):
    """Docker's JSON answers are validated where they come in: the fields read are typed, the
    engine's other keys are kept, and an answer of the wrong shape is an EngineError that names
    the call, not a KeyError or AttributeError further on."""
    from harness.engine import InfoAnswer
    from harness.errors import EngineError

    info = InfoAnswer.model_validate(engine.client.info())
    assert info.architecture and "ServerVersion" in (info.model_extra or {})
    assert engine.info().version != "?"
    monkeypatch.setattr(engine.client, "info", lambda: {"Runtimes": ["runc"], "Architecture": "x86_64"})
    with pytest.raises(EngineError, match=r"`docker info`.*Runtimes"):
        engine.info()


def test_exec_stream_reads_its_output_and_exit_status(engine, run_id):
    """The Ray runner's path: a process started inside a running container, its lines pumped
    out, its state read from the engine's exec answers (Running, ExitCode)."""
    import threading
    import time

    spec = ContainerSpec(image=BUSYBOX, command=("sleep", "60"), labels=(("harness.run-id", run_id),))
    with engine.container(spec) as c:
        lines: list[str] = []
        ended = threading.Event()
        proc = c.exec_stream(["sh", "-c", "echo one; echo two; exit 3"], env={}, sink=lines.append,
                             on_end=ended.set)
        assert ended.wait(30) and lines == ["one", "two"]
        for _ in range(100):
            running, code = proc.state()
            if not running:
                break
            time.sleep(0.1)
        assert (running, code) == (False, 3)
        assert c.state().running and c.state().status == "running"
    assert engine.containers({"harness.run-id": run_id}) == []
