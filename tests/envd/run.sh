#!/usr/bin/env bash
# Drives `agent-reach serve --listen envd=127.0.0.1:PORT` with E2B's own
# Python SDK (`e2b` from PyPI, pinned below) in its local mode
# (`Sandbox.create(debug=True, sandbox_url=...)`): commands, background
# commands killed with their tree, the timeout, files, a path outside the
# root refused, a wrong token refused. Makes (once) a virtualenv under
# target/ (pip's downloads cached under target/pip-cache), builds the binary
# if needed, runs sdk_test.py. Exits non-zero if any check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/common/python.sh
# The SDK version the tests pin (envd protocol of e2b-dev/infra's
# packages/envd/spec, read when the door was written).
E2B_VERSION=2.63.0
export PIP_CACHE_DIR="${PIP_CACHE_DIR:-$PWD/target/pip-cache}"
venv="${ENVD_TEST_VENV:-target/envd-venv-$E2B_VERSION}"
venv_with "$venv" 'e2b' "e2b==$E2B_VERSION"
bin=$(test_binary)
work=$(mktemp -d)
servers=()
cleanup() {
    for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
    rm -rf "$work"
}
trap cleanup EXIT
( umask 077; echo "envd-test-token-$$" > "$work/token" )

# serve_envd NAME [FLAGS...]: a server on a free loopback port with root
# $work/NAME/root; prints the port once /health answers.
serve_envd() {
    local name=$1 port
    shift
    mkdir -p "$work/$name/root"
    port=$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$bin" serve --root "$work/$name/root" --listen "envd=127.0.0.1:$port" "$@" \
        --log-file "$work/$name/serve.log" </dev/null >/dev/null 2>&1 &
    servers+=($!)
    for _ in $(seq 100); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
        sleep 0.1
    done
    echo "$port"
}

work=$(realpath "$work")
port=$(serve_envd open)
echo "== e2b $E2B_VERSION (Python, Sandbox.create(debug=True)) against $bin, envd on 127.0.0.1:$port, no token"
timeout 300 "$venv/bin/python" tests/envd/sdk_test.py "http://127.0.0.1:$port" "$work/open/root"
port=$(serve_envd guarded --token-file "$work/token")
echo "== e2b $E2B_VERSION (Python, with the envd access token) against $bin, envd on 127.0.0.1:$port, --token-file"
timeout 300 "$venv/bin/python" tests/envd/sdk_test.py "http://127.0.0.1:$port" "$work/guarded/root" "$(cat "$work/token")"
