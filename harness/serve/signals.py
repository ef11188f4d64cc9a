"""Processes the tool signals: only those it started, proved by the process itself.

A results folder is data: a forged one may name any process group and copy its start time
from /proc. So the folder only says where to look. Every server the tool starts carries, in
its environment, a marker naming the controller that started it (host, pid and process start
time); the kernel keeps that initial environment in /proc/PID/environ, which the process
cannot be given from outside. A group is signalled only when its leader carries the marker and
the controller the marker names is dead; a process without it is never touched.
"""

from __future__ import annotations

import os
import signal
import socket

from harness.owner import alive
from harness.proc import MARKER
from harness.results.model import Controller

_ENVIRON_LIMIT = 1 << 20


def marker_of(pid: int) -> str | None:
    """The marker in the initial environment of `pid`, or None (no such process, not ours, none)."""
    try:
        with open(f"/proc/{int(pid)}/environ", "rb") as f:
            raw = f.read(_ENVIRON_LIMIT)
    except (OSError, ValueError):
        return None
    prefix = MARKER.encode() + b"="
    for entry in raw.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode("utf-8", "replace")
    return None


def owner_dead(marker: str) -> bool:
    """Whether the controller a marker names ran on this host and is gone (pid reuse included)."""
    parts = marker.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    host, pid, started = parts
    if host != socket.gethostname():
        return False
    try:
        owner = Controller(host=host, pid=int(pid), started=float(started) if started else None)
    except ValueError:
        return False
    return alive(owner) is False


def started_by_dead_controller(pid: int) -> bool:
    """`pid` leads its own process group, carries the tool's marker, and its controller is dead."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1 or pid == os.getpid():
        return False
    try:
        if os.getpgid(pid) != pid:
            return False
    except (ProcessLookupError, PermissionError, OSError):
        return False
    marker = marker_of(pid)
    return marker is not None and owner_dead(marker)


def kill_orphan_group(pgid: int) -> bool:
    """SIGKILL the process group `pgid` when started_by_dead_controller proves it ours; whether it was."""
    if not started_by_dead_controller(pgid):
        return False
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True
