#!/usr/bin/env bash
# SWE-ReX's own DockerDeployment (swe-rex from PyPI) starting agent-reach:
# an image built FROM scratch with the static binary, its `swerex-remote`
# link, busybox (the deployment starts the server with `/bin/sh -c`) and
# a static bash (a SWE-ReX session is a bash shell, as in the original).
# No registry is needed: the image is built here and `pull="never"`.
#
#   tests/swerex/docker.sh BINARY
#
# BINARY must be the static binary (`./install.sh --build-only` prints it).
# Starts dockerd for the run when none answers and it is installed; with no
# Docker at all it prints SKIPPED and exits 0, unless
# AGENT_REACH_REQUIRE names docker (then it fails).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(realpath "$1")
venv="${SWEREX_TEST_VENV:-target/swerex-venv}"
require_docker=0
case ",${AGENT_REACH_REQUIRE:-}," in *,docker,*) require_docker=1 ;; esac
skip() {
  echo "SKIPPED swerex DockerDeployment: $1" >&2
  if [ "$require_docker" = 1 ]; then echo "FAIL: docker is required here"; exit 1; fi
  exit 0
}
command -v docker >/dev/null 2>&1 || skip "no docker client"
for f in /bin/busybox /bin/bash-static; do
  [ -x "$f" ] || skip "$f is missing (Debian: busybox-static, bash-static)"
done
. tests/common/python.sh
venv_with "$venv" 'swerex, aiohttp' 'swe-rex>=1.4,<2' aiohttp

ctx=$(mktemp -d)
dockerd_pid=
tag="agent-reach-swerex-test:$$"
cleanup() {
  docker rmi -f "$tag" >/dev/null 2>&1 || true
  if [ -n "$dockerd_pid" ]; then kill "$dockerd_pid" 2>/dev/null; wait "$dockerd_pid" 2>/dev/null || true; fi
  rm -rf "$ctx"
}
trap cleanup EXIT
if ! timeout 10 docker info >/dev/null 2>&1; then
  command -v dockerd >/dev/null 2>&1 && [ "$(id -u)" = 0 ] || skip "no Docker daemon answers and none can be started"
  dockerd >"$ctx/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 1 60); do timeout 5 docker info >/dev/null 2>&1 && break; sleep 0.5; done
  timeout 10 docker info >/dev/null 2>&1 || { cat "$ctx/dockerd.log"; echo "FAIL: dockerd did not start"; exit 1; }
fi

mkdir -p "$ctx/root/bin" "$ctx/root/usr/local/bin" "$ctx/root/tmp" "$ctx/root/root"
cp /bin/busybox "$ctx/root/bin/busybox"
for applet in sh ls cat echo env mkdir rm sleep true false printf grep sed head tail wc ps kill id uname touch test; do
  ln -s busybox "$ctx/root/bin/$applet"
done
cp /bin/bash-static "$ctx/root/bin/bash"
cp "$bin" "$ctx/root/usr/local/bin/agent-reach"
ln -s agent-reach "$ctx/root/usr/local/bin/swerex-remote"
cat >"$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY root/ /
ENV PATH=/usr/local/bin:/bin HOME=/root
WORKDIR /root
DOCKERFILE
echo "== docker build FROM scratch (agent-reach, swerex-remote link, busybox, static bash)"
timeout 300 docker build -q -t "$tag" "$ctx" >/dev/null
echo "== SWE-ReX DockerDeployment against $tag"
timeout 300 "$venv/bin/python" tests/swerex/docker_test.py "$tag"
