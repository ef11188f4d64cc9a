"""The trust boundary: every path, write and value that comes from data passes here.

A matrix, a run folder, a bundle or a wheel may have been written by somebody else. Six modules
keep what they name from reaching the host: `paths` (what is read), `roots` (a folder named by
data or by the user, walked without following a link out of it), `held` (a folder the tool owns,
held open so that every name in it is reached from that open folder: the compile cache's store),
`writes` (what is written),
`grammar` (what reaches a Dockerfile, a command line or a mount), `readers` (bounds on every
structured file: JSON, TOML, tar, xz, zip). Which processes may be signalled is decided apart,
in harness/serve/signals.py. Each refusal is a ConfigError (exit 2) that names the file or key
and the fix.
"""
