#!/usr/bin/env bash
# Drives `agent-reach serve --listen envd=127.0.0.1:PORT` with E2B's own
# Python SDK (`e2b` from PyPI, pinned below) in its local mode
# (`Sandbox.create(debug=True, sandbox_url=...)`): commands, background
# commands killed with their tree, the timeout, files, directory watching,
# a path outside the root refused, a wrong token refused; then with E2B's
# JavaScript SDK (`e2b` from npm, pinned below; it speaks Connect's JSON
# codec, the binary one is spoken raw beside it): commands, files, a
# background command killed, a directory watched. Makes (once) a virtualenv
# and an npm install under target/ (downloads cached under target/pip-cache
# and target/npm-cache), builds the binary if needed, runs sdk_test.py and
# sdk_test.mjs (with Node 18 or later). Exits non-zero if any check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/common/python.sh
# The SDK version the tests pin (envd protocol of e2b-dev/infra's
# packages/envd/spec, read when the door was written).
E2B_VERSION=2.63.0
# The npm SDK's version (the same protocol).
E2B_NPM_VERSION=2.51.0
export PIP_CACHE_DIR="${PIP_CACHE_DIR:-$PWD/target/pip-cache}"
venv="${ENVD_TEST_VENV:-target/envd-venv-$E2B_VERSION}"
venv_with "$venv" 'e2b' "e2b==$E2B_VERSION"
npm_dir="${ENVD_TEST_NPM:-target/envd-npm-$E2B_NPM_VERSION}"
e2b_js="$npm_dir/node_modules/e2b/dist/index.mjs"
if [[ ! -f "$e2b_js" ]]; then
    echo "== installing e2b@$E2B_NPM_VERSION from npm into $npm_dir"
    mkdir -p "$npm_dir"
    echo '{"private": true}' > "$npm_dir/package.json"
    ( cd "$npm_dir" && npm install --silent --no-audit --no-fund --cache "$OLDPWD/target/npm-cache" "e2b@$E2B_NPM_VERSION" )
fi
e2b_js=$(realpath "$e2b_js")
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
# $work/NAME/root; sets $port once /health answers. Called directly, not in
# $(...): a subshell's `servers+=` would be lost and the server outlive us.
serve_envd() {
    local name=$1
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
}

work=$(realpath "$work")
serve_envd open
echo "== e2b $E2B_VERSION (Python, Sandbox.create(debug=True)) against $bin, envd on 127.0.0.1:$port, no token"
timeout 300 "$venv/bin/python" tests/envd/sdk_test.py "http://127.0.0.1:$port" "$work/open/root"
serve_envd guarded --token-file "$work/token"
echo "== e2b $E2B_VERSION (Python, with the envd access token) against $bin, envd on 127.0.0.1:$port, --token-file"
timeout 300 "$venv/bin/python" tests/envd/sdk_test.py "http://127.0.0.1:$port" "$work/guarded/root" "$(cat "$work/token")"
echo "== e2b $E2B_NPM_VERSION (npm, with the envd access token) against $bin, envd on 127.0.0.1:$port, --token-file"
timeout 300 node tests/envd/sdk_test.mjs "$e2b_js" "http://127.0.0.1:$port" "$work/guarded/root" "$(cat "$work/token")"
serve_envd open-js
echo "== e2b $E2B_NPM_VERSION (npm) against $bin, envd on 127.0.0.1:$port, no token"
timeout 300 node tests/envd/sdk_test.mjs "$e2b_js" "http://127.0.0.1:$port" "$work/open-js/root"
