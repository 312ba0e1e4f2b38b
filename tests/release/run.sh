#!/usr/bin/env bash
# tests/release/run.sh: the release file as a user gets it. Builds it with
# scripts/release.sh (or takes ARCHIVE), checks its .sha256, unpacks it into
# an empty directory and runs what is inside: the binary, its alias links,
# the completions and the man pages. Where a Docker daemon answers, also
# runs the binary alone in a `FROM scratch` image (no loader, no libc).
#
#   tests/release/run.sh [ARCHIVE]
set -euo pipefail
cd "$(dirname "$0")/../.."

fail=0
check() { # check WHAT COMMAND...: runs COMMAND, prints ok/FAIL WHAT
  local what=$1; shift
  if "$@" >/tmp/release-check.$$ 2>&1; then
    echo "ok   $what"
  else
    echo "FAIL $what"; sed 's/^/     /' /tmp/release-check.$$; fail=1
  fi
}

archive=${1:-$(timeout 1800 scripts/release.sh)}
dir=$(dirname "$archive")
base=$(basename "$archive" .tar.gz)
check "the .sha256 matches" bash -c "cd '$dir' && sha256sum -c '$base.tar.gz.sha256'"

empty=$(mktemp -d)
trap 'rm -rf "$empty" /tmp/release-check.$$' EXIT
tar -C "$empty" -xzf "$archive"
top="$empty/$base"
bin="$top/agent-reach"
export HOME="$empty/home" AGENT_REACH_HOME="$empty/ar-home"
mkdir -p "$HOME"
cd "$empty"

check "one top directory" test "$(ls "$empty" | grep -vc '^home$')" = 1
check "agent-reach --version" bash -c "'$bin' --version | grep -q '^agent-reach '"
check "the binary needs no loader" bash -c "LC_ALL=C ldd '$bin' 2>&1 | grep -Eq 'not a dynamic executable|statically linked'"
check "the binary is stripped (no .symtab)" bash -c "! LC_ALL=C readelf -S '$bin' 2>/dev/null | grep -q '\.symtab' && [ \$(stat -c %s '$bin') -lt 20000000 ]"
for alias in apply_patch applypatch agent-reach-sandbox agent-reach-exec swerex-remote; do
  check "$alias is a symbolic link to agent-reach" test "$(readlink "$top/$alias")" = agent-reach
done
check "agent-reach run" bash -c "'$bin' run -- echo hello | grep -qx hello"
check "agent-reach-exec through its link" bash -c "'$top/agent-reach-exec' -- echo linked | grep -qx linked"
printf 'old\n' >"$empty/f.txt"
check "apply_patch through its link" bash -c "'$top/apply_patch' \"\$(printf '*** Begin Patch\n*** Update File: f.txt\n@@\n-old\n+new\n*** End Patch\n')\" && grep -qx new '$empty/f.txt'"
check "LICENSE is Apache-2.0" grep -q "Apache License" "$top/LICENSE"
for f in agent-reach.bash _agent-reach agent-reach.fish agent-reach.elv _agent-reach.ps1; do
  check "completions/$f" test -s "$top/completions/$f"
done
check "the bash completion loads" bash -c "source '$top/completions/agent-reach.bash' && complete -p agent-reach"
check "man/man1/agent-reach.1" grep -q '^.TH agent-reach 1' "$top/man/man1/agent-reach.1"
check "man/man1/agent-reach-run.1 has the exit status" grep -q 'EXIT STATUS' "$top/man/man1/agent-reach-run.1"
if command -v man >/dev/null 2>&1; then
  check "man renders the page" bash -c "MANWIDTH=80 man -l '$top/man/man1/agent-reach-run.1' | grep -q 124"
fi

# A Docker daemon: the one running, else one we start (and stop) ourselves
# where dockerd is installed (Debian: docker.io).
dockerd_pid=
if command -v docker >/dev/null 2>&1 && ! timeout 10 docker info >/dev/null 2>&1 \
    && command -v dockerd >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  dockerd >"$empty/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 1 60); do timeout 5 docker info >/dev/null 2>&1 && break; sleep 0.5; done
fi
stop_dockerd() { if [ -n "$dockerd_pid" ]; then kill "$dockerd_pid" 2>/dev/null; wait "$dockerd_pid" 2>/dev/null || true; fi; }
trap 'stop_dockerd; rm -rf "$empty" /tmp/release-check.$$' EXIT
if command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1; then
  ctx="$empty/image"
  mkdir -p "$ctx"
  cp "$bin" "$ctx/agent-reach"
  printf 'FROM scratch\nCOPY agent-reach /agent-reach\nENTRYPOINT ["/agent-reach"]\n' >"$ctx/Dockerfile"
  tag="agent-reach-scratch-test:$$"
  if timeout 300 docker build -q -t "$tag" "$ctx" >/dev/null 2>&1; then
    check "FROM scratch: agent-reach --version" bash -c "timeout 60 docker run --rm '$tag' --version | grep -q '^agent-reach '"
    check "FROM scratch: run -- /agent-reach --version" bash -c "timeout 60 docker run --rm -e AGENT_REACH_HOME=/tmp/ar '$tag' run -- /agent-reach --version | grep -q '^agent-reach '"
    docker rmi -f "$tag" >/dev/null 2>&1 || true
  else
    echo "FAIL FROM scratch: docker build"; fail=1
  fi
else
  echo "SKIPPED FROM scratch image: no Docker daemon answers here" >&2
  case ",${AGENT_REACH_REQUIRE:-}," in
    *,docker,*) echo "FAIL FROM scratch image: AGENT_REACH_REQUIRE says this machine has docker"; fail=1 ;;
  esac
fi

if [ "$fail" = 0 ]; then echo "release: all checks passed"; else echo "release: FAILED"; fi
exit "$fail"
