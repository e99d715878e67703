#!/usr/bin/env bash
# Unpacks Debian's xtensor, xtl and libxxhash packages into .xt/ (git-ignored), for GPU
# machines that lack them: name `.xt` in the device tool's `carry`. Symbolic links are
# replaced by copies, since a carried tree may drop links.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download libxtensor-dev xtl-dev libxxhash-dev libxxhash0)
rm -rf "$root/.xt"
for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$root/.xt"; done
find "$root/.xt" -type l | while read -r link; do
  cp --remove-destination -L "$link" "$link.copy" && mv "$link.copy" "$link"
done
du -sh "$root/.xt"
