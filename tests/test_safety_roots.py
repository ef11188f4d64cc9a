"""harness.safety.roots: a folder opened as a root follows no link under it, reads nothing
outside and writes nothing outside, whatever the folder holds."""

from __future__ import annotations

import os

import pytest

from harness.errors import ConfigError
from harness.safety.roots import Root


@pytest.fixture
def spot(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("do not read me")
    root = tmp_path / "root"
    root.mkdir()
    return root, outside


def test_a_linked_sub_folder_is_neither_written_nor_read_through(spot):
    root, outside = spot
    (root / "steps").symlink_to(outside)
    r = Root(root, what="bisect folder")
    with pytest.raises(ConfigError, match="steps is a symbolic link"):
        r.save_text("steps/0001.json", "{}")
    with pytest.raises(ConfigError, match="steps is a symbolic link"):
        r.load_text("steps/secret.txt")
    with pytest.raises(ConfigError, match="symbolic link"):
        r.mkdir("steps")
    with pytest.raises(ConfigError, match="symbolic link"):
        r.files("steps")
    assert r.walk() == [] and r.folders() == []  # a link is never listed nor descended
    assert sorted(os.listdir(outside)) == ["secret.txt"]


def test_a_linked_file_is_refused_and_left_alone(spot):
    root, outside = spot
    (root / "result.json").symlink_to(outside / "secret.txt")
    r = Root(root)
    with pytest.raises(ConfigError, match="symbolic link"):
        r.load_text("result.json")
    with pytest.raises(ConfigError, match="symbolic link"):
        r.save_text("result.json", "overwritten")
    assert (outside / "secret.txt").read_text() == "do not read me"
    assert (root / "result.json").is_symlink()
    assert r.files() == [] and r.walk() == []


def test_fifos_and_devices_are_refused_without_blocking(spot):
    root, _ = spot
    os.mkfifo(root / "fifo.json")
    (root / "zero.json").symlink_to("/dev/zero")
    r = Root(root)
    with pytest.raises(ConfigError, match="FIFO"):
        r.load_json("fifo.json")
    with pytest.raises(ConfigError, match="symbolic link"):
        r.load_json("zero.json")
    with pytest.raises(ConfigError, match="FIFO"):
        r.save_text("fifo.json", "x")
    assert r.files() == []


def test_relative_paths_only(spot):
    root, _ = spot
    r = Root(root)
    for bad in ("../outside/secret.txt", "/etc/passwd", "a/../../x", "", "a\x00b"):
        with pytest.raises(ConfigError):
            r.load_text(bad)


def test_writes_are_whole_and_reads_bounded(spot):
    root, _ = spot
    r = Root(root, create=True)
    r.save_text("logs/deep/x.log", "hello")
    assert r.load_text("logs/deep/x.log") == "hello"
    assert r.walk() == ["logs/deep/x.log"] and r.folders() == ["logs"]
    with pytest.raises(ConfigError, match="larger than 3 bytes"):
        r.load_bytes("logs/deep/x.log", limit=3)
    assert [n for n in os.listdir(root / "logs" / "deep") if n.endswith(".tmp")] == []
    with pytest.raises(FileNotFoundError):
        r.load_text("missing.json")
    assert not r.exists("missing.json")


def test_deep_json_is_one_clear_error(spot):
    root, _ = spot
    (root / "bisect.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="nested"):
        Root(root).load_json("bisect.json")


def test_a_walk_is_bounded_in_depth(spot):
    root, _ = spot
    deep = root.joinpath(*["d"] * 70)
    deep.mkdir(parents=True)
    (deep / "x.cmake").write_text("")
    with pytest.raises(ConfigError, match="nested deeper than 64"):
        Root(root).walk(suffix=".cmake")
