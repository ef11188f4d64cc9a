#!/usr/bin/env bash
# A visit's inputs that do not fit one command (at most 64 MiB with the checkout) come in several:
# each command copies what it brings (DIR) into one folder, /tmp/inputs, and a file sent in pieces
# (NAME.part-aa, NAME.part-ab, ... made by `split -a 2`) is joined once every piece is there, which
# NAME.sha256 (sent with the first piece) decides: the pieces are joined only when their
# concatenation has that digest. Then DEV=/tmp/inputs for examples/h200-source/visit.sh and
# examples/h200-cache/device.sh, as if one command had brought it all.
# usage: gather.sh DIR
set -euo pipefail
src=${1:?usage: gather.sh DIR}
dst=${INPUTS:-/tmp/inputs}
mkdir -p "$dst"
cp -r "$src"/. "$dst"/
find "$dst" -name '*.part-aa' | while read -r first; do
  name=${first%.part-aa}
  [ -f "$name.sha256" ] || { echo "gather: $name.sha256 is missing: the pieces cannot be checked" >&2; exit 2; }
  want=$(cut -d' ' -f1 "$name.sha256")
  got=$(cat "$name".part-* | sha256sum | cut -d' ' -f1)
  if [ "$got" = "$want" ]; then
    cat "$name".part-* > "$name" && rm -f "$name".part-*
    echo "gather: $(basename "$name") joined ($(stat -c %s "$name") bytes, sha256 checked)"
  else
    echo "gather: $(basename "$name"): $(ls "$name".part-* | wc -l) piece(s) so far, not whole yet"
  fi
done
