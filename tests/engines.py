"""More Docker engines for the hosts tests and the scheduler benchmark, started and stopped here.

`second_dockerd()`: another dockerd on this machine with its own socket, data root, exec root
(so its own managed containerd), containerd namespace, pid file and bridge interface, and no
iptables rules: it must not touch the main engine's network (docker0, NAT). Published ports go
through docker-proxy; the host network works too. It starts with
no images; `copy_image` moves one over through docker-py (save -> load).

`ssh_engine()`: Debian's openssh-server on a free localhost port with a throw-away host key and
a client key for root, and a temporary HOME whose ~/.ssh/config and known_hosts let docker-py's
paramiko transport reach `ssh://root@127.0.0.1:PORT` (the main engine, through the remote
`docker system dial-stdio`), refusing unknown host keys as it does by default.

Both yield a problem string instead when this machine cannot do it (not root, no dockerd, no
sshd, no paramiko): the tests skip with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

MAIN = "unix:///var/run/docker.sock"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, ok, timeout_s: float, proc: subprocess.Popen | None = None, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ok():
            return
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.25)
    tail = log.read_text(errors="replace")[-2000:] if log and log.is_file() else ""
    raise RuntimeError(f"{what} did not come up in {timeout_s:.0f} s\n{tail}")


def dockerd_problem() -> str | None:
    if os.geteuid() != 0:
        return "starting a second dockerd needs root"
    if not shutil.which("dockerd"):
        return "no dockerd binary on this machine"
    return None


class Dockerd:
    def __init__(self, url: str, proc: subprocess.Popen, tls=None) -> None:
        self.url = url
        self.proc = proc
        self.tls = tls  # harness.run.schedule.Tls for a tcp:// engine with --tlsverify

    def client(self, timeout: int = 30):
        import docker

        if self.tls is None:
            return docker.DockerClient(base_url=self.url, timeout=timeout)
        from harness.engine import connect

        return connect(self.url, timeout, tls=self.tls).client  # our CA, whatever REQUESTS_CA_BUNDLE says

    def stop(self) -> None:
        stop_dockerd(self.proc)


def make_tls(folder: Path):
    """A throw-away CA, a server certificate for 127.0.0.1 and a client certificate (openssl),
    as `dockerd --tlsverify` and `docker --tlsverify` use them."""
    from harness.run.schedule import Tls

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "1",
        "-subj", "/CN=harness-test-ca")
    for name, subject, ext in (("server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
                               ("client", "/CN=harness-test-client", "extendedKeyUsage=clientAuth\n")):
        (folder / f"{name}.ext").write_text(ext)
        ssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}-key.pem", "-out", f"{name}.csr",
            "-subj", subject)
        ssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
            "-out", f"{name}-cert.pem", "-days", "1", "-extfile", f"{name}.ext")
    return Tls(ca_cert=str(folder / "ca.pem"), client_cert=str(folder / "client-cert.pem"),
               client_key=str(folder / "client-key.pem"))


@contextlib.contextmanager
def second_dockerd(timeout_s: float = 60, *, tls: bool = False) -> Iterator[Dockerd]:
    """A fresh dockerd (`.url`, `.stop()`): on a unix socket, or with `tls` on tcp://127.0.0.1
    with --tlsverify (`.tls` holds the client's files). Stopped (SIGTERM, then SIGKILL) and its
    folders removed on the way out."""
    tag = uuid.uuid4().hex[:8]
    root = Path(tempfile.mkdtemp(prefix=f"hd-{tag}-", dir="/tmp"))  # short: socket paths have a limit
    sock = f"/tmp/harness-dockerd-{tag}.sock"
    log = root / "dockerd.log"
    # NOT --bridge=none: dockerd then deletes the interface docker0, the main engine's bridge
    # (daemon_unix.go removeDefaultBridgeInterface). Its own bridge, made here, instead.
    bridge = f"hb{tag}"
    # test sessions and pytest-xdist workers start engines at the same time: one picks and takes
    # a subnet at a time (a lock on this file: nothing made to be left behind)
    with open(__file__, "rb") as me:
        fcntl.flock(me, fcntl.LOCK_EX)
        subnet = _free_subnet()
        subprocess.run(["ip", "link", "add", "name", bridge, "type", "bridge"], check=True)
        subprocess.run(["ip", "addr", "add", f"{subnet}.1/24", "dev", bridge], check=True)
    subprocess.run(["ip", "link", "set", bridge, "up"], check=True)
    url, client_tls = f"unix://{sock}", None
    listen = ["-H", url]
    if tls:
        (root / "tls").mkdir()
        client_tls = make_tls(root / "tls")
        url = f"tcp://127.0.0.1:{free_port()}"
        listen = ["-H", url, "--tlsverify", "--tlscacert", client_tls.ca_cert,
                  "--tlscert", str(root / "tls" / "server-cert.pem"), "--tlskey", str(root / "tls" / "server-key.pem")]
    cmd = ["dockerd", "--data-root", str(root / "data"), "--exec-root", str(root / "x"),
           *listen, "--pidfile", str(root / "dockerd.pid"), "--bridge", bridge,
           "--iptables=false", "--ip-masq=false", "--shutdown-timeout", "2", "--containerd-namespace", f"harness-{tag}",
           "--containerd-plugins-namespace", f"harness-{tag}-plugins"]
    # its containerd dumps its stacks to TMPDIR when stopped: inside root, removed with it
    (root / "tmp").mkdir()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "TMPDIR": str(root / "tmp")})
    handle = Dockerd(url, proc, client_tls)
    try:
        def up() -> bool:
            try:
                handle.client(timeout=5).ping()
            except Exception:  # noqa: BLE001 - not up yet
                return False
            return True

        _wait("the second dockerd", up, timeout_s, proc, log)
        yield handle
    finally:
        stop_dockerd(proc)
        with contextlib.suppress(OSError):
            os.unlink(sock)
        _unmount_under(root)  # dockerd leaves x/netns/default (nsfs) mounted
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _unmount_under(root: Path) -> None:
    """Unmount whatever is mounted below `root`, deepest first."""
    with open("/proc/mounts", encoding="utf-8") as f:
        points = [line.split()[1] for line in f]
    for point in sorted((p for p in points if p.startswith(f"{root}/")), reverse=True):
        subprocess.run(["umount", point], capture_output=True)


def _free_subnet() -> str:
    """A 10.2xx.y.0/24 that no interface here uses yet (first three octets)."""
    used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
    for b in range(200, 250):
        for c in range(1, 255, 7):
            net = f"10.{b}.{c}"
            if f" {net}." not in used:
                return net
    raise RuntimeError("no free 10.2xx.y.0/24 for the second engine's bridge")


def stop_dockerd(proc: subprocess.Popen, timeout_s: float = 30) -> None:
    """Stop a dockerd this module started (by its own process), whatever state it is in."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # its containerd and shims


def copy_image(ref: str, src_url: str, dest) -> None:
    """`docker save | docker load` between two engines (`dest`: a URL or a Dockerd), through docker-py."""
    import docker

    src = docker.DockerClient(base_url=src_url, timeout=300)
    dest = dest.client(timeout=300) if isinstance(dest, Dockerd) else docker.DockerClient(base_url=dest, timeout=300)
    data = b"".join(src.images.get(ref).save(named=ref))  # that tag: the image may carry others
    dest.images.load(data)


def ssh_problem() -> str | None:
    if not Path("/usr/sbin/sshd").exists():
        return "no /usr/sbin/sshd (apt-get install openssh-server)"
    if not shutil.which("ssh-keygen"):
        return "no ssh-keygen"
    try:
        import paramiko  # noqa: F401 - docker-py's ssh transport
    except ImportError:
        return "paramiko is not installed (docker-py's ssh:// transport needs it: pip install paramiko)"
    if os.geteuid() != 0:
        return "sshd for root needs root"
    return None


@contextlib.contextmanager
def ssh_engine(timeout_s: float = 30) -> Iterator[tuple[str, Path]]:
    """sshd on localhost; yields (ssh:// URL of the main engine, the HOME to set while using it)."""
    port = free_port()
    root = Path(tempfile.mkdtemp(prefix="harness-sshd-"))
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    os.chmod(root, 0o700)
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / name)], check=True)
    (root / "authorized_keys").write_text((root / "client.pub").read_text())
    os.chmod(root / "authorized_keys", 0o600)
    config = root / "sshd_config"
    config.write_text(f"""Port {port}
ListenAddress 127.0.0.1
HostKey {root / 'host'}
PidFile {root / 'sshd.pid'}
AuthorizedKeysFile {root / 'authorized_keys'}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
""")
    (home / ".ssh" / "config").write_text(f"Host 127.0.0.1\n  Port {port}\n  User root\n"
                                          f"  IdentityFile {root / 'client'}\n")
    host_pub = (root / "host.pub").read_text().split()
    (home / ".ssh" / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation folder
    log = root / "sshd.log"
    proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(config)], stdout=log.open("wb"),
                            stderr=subprocess.STDOUT)
    try:
        def up() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                return False
            return True

        _wait("sshd", up, timeout_s, proc, log)
        yield f"ssh://root@127.0.0.1:{port}", home
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def fake_vllm_context(base: str = "harness-test/debian-python:bookworm", pythonpath: str = "/opt/fake") -> bytes:
    """Build context of the stand-in vLLM image (as tests/test_pipeline_docker.py) on `base`."""
    import io
    import tarfile

    root = Path(__file__).resolve().parent.parent
    fakevllm = root / "tests" / "fixtures" / "fakevllm"
    buf = io.BytesIO()
    dockerfile = (f"FROM {base}\nCOPY fakeserver.py /opt/fake/fakeserver.py\nCOPY vllm /opt/fake/vllm\n"
                  f"ENV PYTHONPATH={pythonpath} HARNESS_FAKESERVER=/opt/fake/fakeserver.py\n"
                  "LABEL harness.test=fakevllm\n")
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        add("Dockerfile", dockerfile.encode())
        add("fakeserver.py", (root / "tests" / "support" / "fakeserver.py").read_bytes())
        for path in sorted((fakevllm / "vllm").rglob("*.py")):
            add(str(path.relative_to(fakevllm)), path.read_bytes())
    return buf.getvalue()
