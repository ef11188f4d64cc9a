#!/usr/bin/env bash
# ccache for a base image that has none (the compile cache needs it in the build steps), where
# no package index can be reached: Debian bookworm's ccache 4.7.5 and the one library it needs
# beyond glibc, libstdc++ and libzstd (libhiredis 0.14), taken from Debian's packages here and
# added to the base there. Runs on glibc >= 2.34 (Debian 12, Ubuntu 22.04 / 24.04).
#   tools/ccache-kit.sh make DIR          # here: DIR/ccache, DIR/libhiredis.so.0.14 (~1 MB)
#   tools/ccache-kit.sh add IMAGE DIR     # there: IMAGE plus ccache, under the same tag;
#                                         # an IMAGE that has ccache is left as it is
set -euo pipefail
case "${1:-}" in
make)
  dir=$(realpath -m "${2:?usage: ccache-kit.sh make DIR}"); mkdir -p "$dir"
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && apt-get download ccache libhiredis0.14 >/dev/null 2>&1) \
    || { echo "ccache-kit: apt-get download ccache libhiredis0.14 failed (a Debian bookworm host?)" >&2; exit 1; }
  for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
  cp "$tmp/root/usr/bin/ccache" "$dir/ccache"
  cp -L "$tmp"/root/usr/lib/*/libhiredis.so.0.14 "$dir/libhiredis.so.0.14"
  (cd "$tmp" && ls ./*.deb) > "$dir/FROM"
  (cd "$dir" && sha256sum ccache libhiredis.so.0.14 > SHA256SUMS)
  echo "ccache-kit: $(du -sh "$dir" | cut -f1) in $dir ($(tr '\n' ' ' < "$dir/FROM"))"
  ;;
add)
  image=${2:?usage: ccache-kit.sh add IMAGE DIR}; dir=$(realpath "${3:?usage: ccache-kit.sh add IMAGE DIR}")
  if docker run --rm --entrypoint sh "$image" -c 'command -v ccache' >/dev/null 2>&1; then
    echo "ccache-kit: $image has ccache: $(docker run --rm --entrypoint ccache "$image" --version | head -1)"; exit 0
  fi
  (cd "$dir" && sha256sum -c --quiet SHA256SUMS) || { echo "ccache-kit: $dir does not match its SHA256SUMS" >&2; exit 1; }
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  cp "$dir/ccache" "$dir/libhiredis.so.0.14" "$tmp/"
  printf '%s\n' "FROM $image" 'COPY ccache /usr/local/bin/ccache' 'COPY libhiredis.so.0.14 /usr/local/lib/libhiredis.so.0.14' \
    'RUN chmod 755 /usr/local/bin/ccache && ldconfig && ccache --version | head -1' > "$tmp/Dockerfile"
  docker build -q -t "$image" "$tmp" >/dev/null
  echo "ccache-kit: added to $image: $(docker run --rm --entrypoint ccache "$image" --version | head -1)"
  ;;
*) echo "usage: ccache-kit.sh make DIR | add IMAGE DIR" >&2; exit 2 ;;
esac
