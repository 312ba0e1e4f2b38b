#!/usr/bin/env bash
# scripts/release.sh: the release file a user unpacks into a bin directory.
#
#   scripts/release.sh [--out-dir DIR]     (default DIR: dist/)
#
# Builds the shipped binary with install.sh --build-only (static on glibc,
# stripped: Cargo.toml's [profile.dist]) and refuses a binary that needs a
# loader. Writes DIR/agent-reach-<version>-<target>.tar.gz holding one top
# directory with agent-reach, its alias links (symbolic links), LICENSE,
# README.md, completions/ (bash, zsh, fish, elvish, powershell) and
# man/man1/, plus DIR/agent-reach-<version>-<target>.tar.gz.sha256 in the
# format `sha256sum -c` reads. Prints the archive's path.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
out_dir="$here/dist"
while [ $# -gt 0 ]; do
  case "$1" in
    --out-dir) out_dir=${2:?--out-dir needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "release.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

built=$("$here/install.sh" --build-only)
if ! LC_ALL=C ldd "$built" 2>&1 | grep -Eq 'not a dynamic executable|statically linked'; then
  echo "release.sh: $built is linked dynamically; the release needs the static build (is glibc's static libc installed?)" >&2
  exit 1
fi
version=$("$built" --version | awk '{print $2}')
target=$(rustc -vV | sed -n 's/^host: //p')
name="agent-reach-$version-$target"
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
top="$stage/$name"
mkdir -p "$top/completions" "$top/man/man1"
install -m 0755 "$built" "$top/agent-reach"
for alias in apply_patch applypatch agent-reach-sandbox agent-reach-exec swerex-remote; do
  ln -s agent-reach "$top/$alias"
done
install -m 0644 "$here/LICENSE" "$here/README.md" "$top/"
"$top/agent-reach" completions bash >"$top/completions/agent-reach.bash"
"$top/agent-reach" completions zsh >"$top/completions/_agent-reach"
"$top/agent-reach" completions fish >"$top/completions/agent-reach.fish"
"$top/agent-reach" completions elvish >"$top/completions/agent-reach.elv"
"$top/agent-reach" completions powershell >"$top/completions/_agent-reach.ps1"
"$top/agent-reach" man --out-dir "$top/man/man1"

# The same bytes from the same commit: fixed owner, order and times.
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$here" log -1 --format=%ct 2>/dev/null || echo 0)}
archive="$out_dir/$name.tar.gz"
tar -C "$stage" --owner=0 --group=0 --numeric-owner --sort=name \
  --mtime="@$epoch" -cf - "$name" | gzip -n -9 >"$archive.tmp"
mv -f "$archive.tmp" "$archive"
(cd "$out_dir" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
echo "release.sh: $(du -h "$archive" | cut -f1) $archive" >&2
echo "$archive"
