"""The trust boundary: every path, write, signal and value that comes from data passes here.

A matrix, a run folder, a bundle or a wheel may have been written by somebody else. Four choke
points keep what they name from reaching the host: `paths` (what is read), `writes` (what is
written), `signals` (which processes are signalled), `grammar` (what reaches a Dockerfile, a
command line or a mount); `readers` bounds every structured file (JSON, TOML, tar, xz, zip).
Each refusal is a ConfigError (exit 2) that names the file or key and the fix.
"""
