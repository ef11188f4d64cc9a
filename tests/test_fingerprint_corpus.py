"""The corpus of real logs (tests/fixtures/logs/corpus, collected from upstream threads) is a
regression suite: every hand-checked expectation must hold. The score command itself is tested
on a scratch corpus for its exit codes."""

from __future__ import annotations

import shutil

import pytest

from harness.fingerprint.corpus import DEFAULT_DIR, main, score


def test_every_corpus_expectation_holds():
    facts = score(DEFAULT_DIR)
    misses = [f"{f.log} {f.key}: expected {f.expected!r}, got {f.got!r}" for f in facts if not f.ok]
    assert len({f.log for f in facts}) >= 19
    assert not misses, "\n".join(misses)


def test_score_command_passes_on_the_corpus(capsys):
    assert main([]) == 0
    assert "score:" in capsys.readouterr().out


@pytest.fixture
def scratch(tmp_path):
    for name in ("016-v0191-phi3-ok", "010-gb10-fi3486-swiglustep-refused"):
        for ext in (".log", ".toml"):
            shutil.copy(DEFAULT_DIR / f"{name}{ext}", tmp_path / f"{name}{ext}")
    return tmp_path


def test_a_wrong_expectation_is_a_listed_miss_and_exit_1(scratch, capsys):
    side = scratch / "010-gb10-fi3486-swiglustep-refused.toml"
    side.write_text(
        side.read_text().replace('failure_class = "backend-refused"', 'failure_class = "oom"')
    )
    assert main([str(scratch)]) == 1
    out = capsys.readouterr().out
    assert "MISS 010-gb10-fi3486-swiglustep-refused failure_class: expected 'oom'" in out


def test_an_unknown_signature_id_in_signatures_absent_is_a_miss(scratch, capsys):
    side = scratch / "016-v0191-phi3-ok.toml"
    side.write_text(side.read_text() + 'signatures_absent = ["no-such-signature"]\n')
    assert main([str(scratch)]) == 1
    assert "unknown id" in capsys.readouterr().out


def test_an_unknown_key_is_exit_2_naming_file_and_key(scratch, capsys):
    side = scratch / "016-v0191-phi3-ok.toml"
    side.write_text(side.read_text() + "moe_backnd = 'MARLIN'\n")
    assert main([str(scratch)]) == 2
    err = capsys.readouterr().err
    assert "016-v0191-phi3-ok.toml" in err and "moe_backnd" in err


def test_missing_sidecar_is_exit_2(scratch, capsys):
    (scratch / "016-v0191-phi3-ok.toml").unlink()
    assert main([str(scratch)]) == 2
    assert "missing sidecar" in capsys.readouterr().err


def test_a_sidecar_with_an_older_class_name_is_scored_against_what_it_became(scratch, capsys):
    # corpora written before the cause vocabulary (issue 42) still load: "unclassified" is "other"
    side = scratch / "010-gb10-fi3486-swiglustep-refused.toml"
    side.write_text(
        side.read_text().replace('failure_class = "backend-refused"', 'failure_class = "unclassified"')
    )
    assert main([str(scratch)]) == 1
    assert "failure_class: expected 'other', got 'backend-refused'" in capsys.readouterr().out
    side.write_text(side.read_text().replace('failure_class = "unclassified"', 'failure_class = "no-such-class"'))
    assert main([str(scratch)]) == 2
    assert "failure_class" in capsys.readouterr().err
