"""What a matrix may hand a container: folders to mount, device nodes, an engine to talk to.

A matrix is data. A folder it names is mounted read-only unless it is a cache the tool writes
(then it must be neither a system folder, nor a home folder, nor hold credentials); no mount is
ever `/`, a system or credential folder, or the Docker socket. Device nodes are the GPU's own
(/dev/nvidia*, /dev/dri) unless `[host].allow_devices` lists another by its full path. An engine
URL has a port in 1..65535, and a unix:// engine is a `.sock` under /run, /var/run, /tmp or a
home folder's Docker folder: never a file elsewhere.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from urllib.parse import urlsplit

from harness.errors import ConfigError
from harness.matrix.paths import mount_problem, secret_part
from harness.matrix.problem import problem
from harness.safety import grammar
from harness.safety.paths import special

# Never mounted, even read-only: the host root, its configuration, kernel and engine state.
DENY_TREES: tuple[Path, ...] = tuple(Path(p) for p in (
    "/etc", "/root", "/proc", "/sys", "/boot", "/dev", "/run", "/var/run", "/var/lib/docker",
    "/var/lib/containerd", "/var/log", "/var/spool", "/var/mail", "/home/.ecryptfs",
))
DENY_EXACT: frozenset[Path] = frozenset(Path(p) for p in ("/", "/var", "/home", "/usr", "/tmp", "/opt", "/srv", "/mnt", "/media"))
GPU_DEVICE = re.compile(r"/dev/(?:nvidia[A-Za-z0-9_-]*|nvidia-caps/[A-Za-z0-9_-]+|dri(?:/[A-Za-z0-9_-]+)?)")
_MOUNT_TEXT = re.compile(r"/[^\n\r\x00:,]*")
UNIX_SOCKET = re.compile(r"/(?:var/)?(?:run|tmp)/(?:[A-Za-z0-9_.-]+/){0,4}[A-Za-z0-9_.-]+\.sock"
                         r"|/(?:home/[A-Za-z0-9_.-]+|root|Users/[A-Za-z0-9_.-]+)/"
                         r"(?:\.docker/(?:run/|desktop/)?|\.colima/[A-Za-z0-9_.-]+/|\.rd/|\.orbstack/run/)docker\.sock")


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _resolved(path: str) -> Path | str:
    if not _MOUNT_TEXT.fullmatch(path):
        return f"{path!r} is not an absolute folder path (no ':' ',' or line break)"
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError) as exc:
        return f"cannot resolve {path}: {exc}"


def read_only_mount_problem(path: str) -> str | None:
    """Why `path` must not be bind-mounted even read-only, or None."""
    real = _resolved(path)
    if isinstance(real, str):
        return real
    if real in DENY_EXACT or any(_inside(real, t) for t in DENY_TREES):
        return f"{path} (-> {real}) is a system folder or lies in one: never mounted into a container"
    if (part := secret_part(real)) is not None:
        return f"{path} lies in '{part}', a folder of credentials: never mounted into a container"
    if "docker.sock" in real.name or real.name.endswith(".sock"):
        return f"{path} names a socket: never mounted into a container"
    try:
        mode = real.stat().st_mode
    except OSError:
        return None  # judged by its name alone where it does not exist (yet)
    if not stat.S_ISDIR(mode):
        return f"{path} is not a folder: only folders are mounted"
    homes = {Path(os.path.expanduser("~")).resolve(), Path("/root")}
    if real in homes or real.parent in (Path("/home"), Path("/Users")):
        return f"{path} is a home folder: a container would see all of it"
    for name in (".ssh", ".aws", ".docker", ".gnupg", ".kube", ".netrc", ".git-credentials", ".password-store"):
        if (real / name).exists():
            return f"{path} holds '{name}' (credentials): never mounted into a container"
    return None


def writable_mount_problem(path: str) -> str | None:
    """Why `path` must not be bind-mounted read-write, or None: stricter than read-only, and
    never a home folder itself nor a folder holding credentials."""
    if (why := read_only_mount_problem(path)) is not None:
        return why
    real = Path(path).resolve()
    if (why := mount_problem(real)) is not None:
        return why
    if (real / ".config").exists():
        return f"{path} holds '.config' (application credentials): never mounted read-write"
    return None


def device_problem(dev: str, allowed: tuple[str, ...] = ()) -> str | None:
    """Why `dev` must not be passed to a container, or None."""
    if not isinstance(dev, str) or not re.fullmatch(r"/dev/[A-Za-z0-9_./-]{1,200}", dev) or ".." in dev.split("/"):
        return f"{dev!r} is not a device path under /dev"
    if dev in allowed:
        return None
    if not GPU_DEVICE.fullmatch(dev):
        return f"{dev} is not a GPU device node (/dev/nvidia*, /dev/dri/*)"
    try:
        real = os.path.realpath(dev)
    except (OSError, ValueError):
        return f"cannot resolve {dev}"
    if real != dev and not GPU_DEVICE.fullmatch(real):
        return f"{dev} links to {real}, not a GPU device node"
    return None


def engine_url_problem(url: str) -> str | None:
    """Why `url` is not a Docker engine URL this tool talks to, or None."""
    why = _engine_url_problem(url)
    return None if why is None else f"{url!r} is not a Docker engine URL: {why}"


def _engine_url_problem(url: str) -> str | None:
    if not isinstance(url, str) or re.search(r"[\s\x00]", url):
        return "it holds a space, a line break or a NUL"
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "no scheme (forms: unix:///var/run/docker.sock, ssh://user@host[:port], tcp://host:2376)"
    if scheme == "unix":
        if not UNIX_SOCKET.fullmatch(rest) or ".." in rest.split("/"):
            return ("not a Docker socket (a .sock under /run, /var/run or /tmp, or a home folder's "
                    ".docker/run/docker.sock)")
        return None
    if scheme == "npipe":
        return None
    if scheme not in ("ssh", "tcp", "http", "https"):
        return f"scheme '{scheme}' is not unix, ssh, tcp, http or https"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"not a URL ({exc})"
    if not parts.hostname:
        return "it names no host"
    # ssh reads a host or user that starts with '-' as an option (-oProxyCommand=... runs a command)
    if (parts.hostname or "").startswith("-") or (parts.username or "").startswith("-"):
        return "its user or host starts with '-' (ssh would read it as an option)"
    if port is not None and not 1 <= port <= 65535:
        return f"port {port} is not in 1..65535"
    if re.search(r":0*(?:/|$)", parts.netloc.rsplit("@", 1)[-1]) or parts.netloc.endswith(":"):
        return "port 0 or an empty port (give 1..65535)"
    return None


def gpu_id_problem(gpu: int | str) -> str | None:
    if isinstance(gpu, bool):
        return f"{gpu!r} is not a GPU index or UUID"
    if isinstance(gpu, int):
        return None if 0 <= gpu < 4096 else f"GPU index {gpu} is not in 0..4095"
    if isinstance(gpu, str) and re.fullmatch(r"\d{1,4}|(?:GPU|MIG)-[A-Za-z0-9-]{1,80}", gpu):
        return None
    return f"{gpu!r} is not a GPU index (0, 1, ...) or UUID (GPU-...)"


def _pem_problem(value: str) -> str | None:
    """A TLS file docker-py will read: a regular file (or not there yet), never under /proc, /sys, /dev."""
    if any(c in value for c in "\n\r\x00"):
        return f"{value!r} holds a line break or NUL"
    path = Path(os.path.expanduser(value))
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as exc:
        return f"cannot resolve {value}: {exc}"
    if any(_inside(real, Path(t)) for t in ("/proc", "/sys", "/dev")):
        return f"{value} (-> {real}) is not a certificate file"
    if (kind := special(real)) is not None:
        return f"{value} is {kind}, not a certificate file"
    return None


def matrix_problems(spec, matrix_dir: Path) -> list[str]:
    """Every mount, device, engine URL and patch name of a matrix file checked (load.py collects them)."""
    problems: list[str] = []
    fix_dir = "name a folder of its own, e.g. /home/me/.cache/vllm (never /, a system or credential folder)"
    if (cache := spec.serve.vllm_cache) is not None and (why := writable_mount_problem(cache)):
        problems.append(problem("serve.vllm_cache", why, fix_dir))
    host = spec.host
    allowed = tuple(host.allow_devices)
    for i, dev in enumerate(host.devices):
        if (why := device_problem(dev, allowed)) is not None:
            problems.append(problem(f"host.devices[{i}]", why, "list the GPU's own nodes (/dev/nvidia0, "
                                    "/dev/nvidiactl, /dev/nvidia-uvm); another node only by adding its full "
                                    "path to host.allow_devices"))
    for i, dev in enumerate(allowed):
        if not re.fullmatch(r"/dev/[A-Za-z0-9_./-]{1,200}", dev) or ".." in dev.split("/"):
            problems.append(problem(f"host.allow_devices[{i}]", f"{dev!r} is not a device path under /dev",
                                    "write the node's full path, e.g. /dev/infiniband/uverbs0"))
    for i, folder in enumerate(host.driver_dirs):
        if (why := read_only_mount_problem(folder)) is not None:
            problems.append(problem(f"host.driver_dirs[{i}]", why, "name the driver's own library folder, "
                                    "e.g. /usr/lib/x86_64-linux-gnu/nvidia"))
    for name, h in spec.hosts.items():
        if h.engine is not None and (why := engine_url_problem(h.engine)) is not None:
            problems.append(problem(f"hosts.{name}.engine", why, "forms: unix:///var/run/docker.sock, "
                                    "ssh://user@host[:port], tcp://host:2376"))
        if h.address is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}|\[?[0-9A-Fa-f:.]{2,45}\]?",
                                                      h.address):
            problems.append(problem(f"hosts.{name}.address", f"{h.address!r} is not a host name or IP address",
                                    "write the host's name or address, e.g. spark.lan or 10.0.0.5"))
        for field in ("ca_cert", "client_cert", "client_key"):
            value = getattr(h.tls, field, None) if h.tls is not None else None
            if value is not None and (why := _pem_problem(value)) is not None:
                problems.append(problem(f"hosts.{name}.tls.{field}", why, "name the PEM file itself"))
        for i, g in enumerate(h.gpus if isinstance(h.gpus, tuple) else ()):
            if (why := gpu_id_problem(g)) is not None:
                problems.append(problem(f"hosts.{name}.gpus[{i}]", why, "list GPU indices from 0 or GPU UUIDs"))
    for name, stack in spec.stacks.items():
        named: list[tuple[str, str]] = []
        if stack.vllm:
            named += [(f"stacks.{name}.vllm.patches[{i}]", p.path) for i, p in enumerate(stack.vllm.patches)]
        if stack.flashinfer:
            named += [(f"stacks.{name}.flashinfer.prs[{i}].patch", pr.patch) for i, pr in enumerate(stack.flashinfer.prs)]
        if stack.wheels:
            named += [(f"stacks.{name}.wheels.patches[{i}]", p) for i, p in enumerate(stack.wheels.patches)]
            if stack.wheels.wheelhouse is not None:
                where = Path(stack.wheels.wheelhouse)
                where = where if where.is_absolute() else matrix_dir / where
                if (why := read_only_mount_problem(str(where))) is not None:
                    problems.append(problem(f"stacks.{name}.wheels.wheelhouse", why,
                                            "name the folder `harness bundle install --dest` wrote"))
        for key, rel in named:
            # the file name becomes a Dockerfile COPY line and a build-context path
            if (why := grammar.problem("file_name", Path(rel).name if "\n" not in rel else rel)) is not None:
                problems.append(problem(key, f"patch file name: {why}", "rename the file: letters, digits and "
                                        ". _ + = , @ - only"))
    return problems


def node_problems(rows: list[dict], matrix) -> None:
    """Refuse (exit 2) a cell whose config spans more machines (`nodes`) than the hosts that can
    take it: it could never start, and a plan that lists it says otherwise."""
    spec = matrix.spec
    for row in rows:
        nodes = spec.configs[row["config"]].nodes
        able = len(row["hosts"]) if spec.hosts else 1
        if nodes > able:
            raise ConfigError(f"{matrix.path}: configs.{row['config']}.nodes = {nodes}, but only {able} host(s) "
                              f"can take cell {row['id']}",
                              hint="lower nodes, or add [hosts] entries that take its stack and hardware")
