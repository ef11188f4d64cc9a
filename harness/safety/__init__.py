"""The trust boundary: every path, write, number and value that comes from data passes here.

A matrix, a run folder, a bundle or a wheel may have been written by somebody else, and a flag
or an environment variable typed by anyone. The choke points keep what they name from reaching
the host: `paths` (what is read), `roots` (folders walked one name at a time, never through a
link), `writes` (what is written), `grammar` (what reaches a Dockerfile, a command line, a mount
or a URL template), `numbers` (every number from the command line or the environment);
`readers` bounds every structured file (JSON, TOML, tar, xz) and `wheels` every wheel unpacked
or re-packed. Each refusal is a ConfigError (exit 2) that names the file, key, option or
variable and the fix.
"""
