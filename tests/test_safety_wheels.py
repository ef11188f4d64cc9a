"""A wheel from data unpacked or re-packed with bounds, through a root (harness/safety/wheels.py)."""

from __future__ import annotations

import io
import zipfile

import pytest

from harness.errors import ConfigError
from harness.safety.roots import Root
from harness.safety.wheels import repack_wheel, unpack_wheel


def _zip(path, members: dict[str, bytes]) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    path.write_bytes(buf.getvalue())


def test_a_wheel_is_unpacked_through_its_root(tmp_path):
    whl = tmp_path / "a-1.0-py3-none-any.whl"
    _zip(whl, {"a/__init__.py": b"X = 1\n", "a-1.0.dist-info/RECORD": b""})
    assert unpack_wheel(whl, Root(tmp_path / "site", create=True)) == ["a/__init__.py", "a-1.0.dist-info/RECORD"]
    assert (tmp_path / "site" / "a" / "__init__.py").read_text() == "X = 1\n"


def test_a_zip_bomb_stops_at_the_bound(tmp_path):
    whl = tmp_path / "a-1.0-py3-none-any.whl"
    _zip(whl, {"a/big.bin": b"\0" * (8 << 20)})  # 8 MiB of zeros, a few KiB packed
    with pytest.raises(ConfigError, match="more than 1048576 bytes"):
        unpack_wheel(whl, Root(tmp_path / "site", create=True), max_bytes=1 << 20)


def test_a_link_planted_in_the_site_is_never_written_through(tmp_path):
    whl = tmp_path / "a-1.0-py3-none-any.whl"
    _zip(whl, {"a/__init__.py": b"pwned\n"})
    outside = tmp_path / "outside"
    outside.mkdir()
    site = tmp_path / "site"
    site.mkdir()
    (site / "a").symlink_to(outside)
    with pytest.raises(ConfigError, match="symbolic link"):
        unpack_wheel(whl, Root(site))
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("data", [b"", b"not a zip", b"PK\x03\x04" + b"\0" * 64])
def test_what_is_not_a_zip_is_one_error(tmp_path, data):
    whl = tmp_path / "a-1.0-py3-none-any.whl"
    whl.write_bytes(data)
    with pytest.raises(ConfigError, match="not a readable wheel"):
        unpack_wheel(whl, Root(tmp_path / "site", create=True))
    with pytest.raises(ConfigError, match="not a readable wheel"):
        repack_wheel(whl, tmp_path / "out.whl", lambda _n: False)


def test_repack_drops_members_and_their_record_lines(tmp_path):
    src = tmp_path / "a-1.0-py3-none-any.whl"
    _zip(src, {"a/keep.py": b"k", "a/drop.so": b"d", "a-1.0.dist-info/RECORD": b"a/keep.py,,\na/drop.so,,\n"})
    dest = tmp_path / "out" / "a-1.0-py3-none-any.whl"
    dest.parent.mkdir()
    assert repack_wheel(src, dest, lambda n: n.endswith(".so")) == ["a/drop.so"]
    with zipfile.ZipFile(dest) as z:
        assert sorted(z.namelist()) == ["a-1.0.dist-info/RECORD", "a/keep.py"]
        assert z.read("a-1.0.dist-info/RECORD") == b"a/keep.py,,\n"
