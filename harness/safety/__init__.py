"""The trust boundary: every path, write, number and value that comes from data passes here.

A matrix, a run folder, a bundle or a wheel may have been written by somebody else, and a flag
or an environment variable typed by anyone. The choke points keep what they name from reaching
the host: `paths` (what is read), `roots` (folders walked one name at a time, never through a
link), `held` (a folder the tool owns, held open so that every name in it is reached from that
open folder: the compile cache's store), `writes` (what is written), `grammar` (what reaches a
Dockerfile, a command line, a mount or a URL template), `numbers` (every number from the command
line or the environment); `readers` bounds every structured file (JSON, TOML, tar, xz) and
`wheels` every wheel unpacked or re-packed. Which processes may be signalled is decided apart, in
harness/serve/signals.py. Each refusal is a ConfigError (exit 2) that names the file, key,
option or variable and the fix.
"""
