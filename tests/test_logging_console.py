"""Log records leave through the console and its mask, set up once by the command line.

Each case runs `harness.cli.main` in a fresh interpreter (logging is process-wide), with the
`env` command's body replaced by one that logs as the product's modules do, so what is
checked is the real set-up of the real entry point, not a handler a test installed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SECRET = "hunter2"


def _main(body: str, *argv: str) -> subprocess.CompletedProcess:
    script = textwrap.dedent("""
        import logging, sys
        import harness.cli.env as env_command
        from harness import proc

        def run(args):
        {body}
            return 0

        env_command.run = run
        from harness.cli import main
        sys.exit(main(sys.argv[1:]))
    """).format(body=textwrap.indent(textwrap.dedent(body), "    "))
    return subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=120)


WARN = f"""
logging.getLogger("harness.engine").warning("could not stop container c1: tcp://admin:{SECRET}@host:2376 refused")
"""


def test_a_warning_from_engine_py_comes_out_masked_through_the_console():
    r = _main(WARN, "env")
    assert r.returncode == 0, r.stderr
    assert SECRET not in r.stderr + r.stdout
    # our handler's line (Python's fallback handler would print the bare message, unmasked)
    assert "WARNING harness.engine: could not stop container c1: tcp://admin:***@host:2376 refused" in r.stderr, r.stderr


def test_warning_is_the_default_level_and_debug_lines_need_v():
    body = """
    logging.getLogger("harness.image").info("an info line")
    proc.run([sys.executable, "-c", "pass", "--api-key", "s3cr3t-value"], timeout=60)
    """
    quiet = _main(body, "env")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    for argv in (("-v", "env"), ("env", "-v")):  # before or after the command's name
        loud = _main(body, *argv)
        assert loud.returncode == 0, loud.stderr
        # every command the tool runs, with its argv, masked
        assert f"DEBUG harness.proc: run: {sys.executable} -c pass --api-key ***" in loud.stderr, loud.stderr
        assert "s3cr3t-value" not in loud.stderr
        assert "INFO harness.image: an info line" in loud.stderr


def test_a_real_command_shows_what_it_runs_with_v():
    # `harness env` asks docker for its version through proc.run
    r = subprocess.run([sys.executable, "-m", "harness", "-v", "env", "--json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "DEBUG harness.proc: run: docker version --format '{{.Server.Version}}'" in r.stderr, r.stderr
