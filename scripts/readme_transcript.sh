#!/usr/bin/env bash
# scripts/readme_transcript.sh: the output the README's quick start shows
# for its fold example, produced again now.
#
#   scripts/readme_transcript.sh      (AGENT_REACH_BIN: the binary to run;
#                                      default target/debug/agent-reach)
#
# Runs the README's `~/.local/bin/agent-reach run ...` line exactly as
# written, with bash, in a fresh temporary HOME whose ~/.local/bin/agent-reach
# is a link to the binary and a cleared environment, and prints its stdout
# with that HOME written as `~`. When the fold changes, paste the output into
# the README's `text` block under the line; tests/suite/docs.rs checks that
# the two match (the spill file's name aside, which differs per run).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
bin=${AGENT_REACH_BIN:-$here/target/debug/agent-reach}
case "$bin" in /*) ;; *) bin="$PWD/$bin" ;; esac
if [ ! -x "$bin" ]; then
  echo "readme_transcript.sh: no binary at $bin (cargo build, or set AGENT_REACH_BIN)" >&2
  exit 2
fi
line=$(grep -m1 '^~/\.local/bin/agent-reach run ' "$here/README.md") || {
  echo "readme_transcript.sh: README.md has no line starting with ~/.local/bin/agent-reach run" >&2
  exit 1
}

home=$(mktemp -d "${TMPDIR:-/tmp}/readme-transcript.XXXXXX")
trap 'rm -rf "$home"' EXIT
mkdir -p "$home/.local/bin"
ln -s "$bin" "$home/.local/bin/agent-reach"

cd "$home"
env -i HOME="$home" PATH="$home/.local/bin:/usr/local/bin:/usr/bin:/bin" LANG=C.UTF-8 \
  bash -c "$line" | sed "s#$home#~#g"
