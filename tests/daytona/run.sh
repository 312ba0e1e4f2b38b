#!/usr/bin/env bash
# Drives `agent-reach serve --listen daytona=127.0.0.1:PORT --token-file F`
# with Daytona's own Python SDK (`daytona` from PyPI, pinned below):
# `Daytona(DaytonaConfig(api_key=TOKEN, api_url=".../api")).get(ID)`, then
# process.exec (output, exit code, cwd, env, the timeout with a `setsid`
# child gone), code_run, sessions (state kept, async commands with
# followed logs), a PTY, the file operations with a 20 MB round trip, a path
# outside the root refused, a wrong API key refused; then the npm SDK
# (`@daytonaio/sdk`, pinned below) for `process.executeCommand` and the
# files. Makes (once) a virtualenv under target/ (pip's downloads cached
# under target/pip-cache) and an npm folder under target/, builds the
# binary if needed, runs sdk_test.py and npm_test.mjs. Exits non-zero if
# any check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/common/python.sh
# The SDK version the tests pin (the toolbox API the door was written to;
# src/doors/daytona/mod.rs, SDK_VERSION).
DAYTONA_VERSION=0.226.1
# The npm SDK lags the PyPI package's numbering.
DAYTONA_NPM_VERSION=0.218.0
export PIP_CACHE_DIR="${PIP_CACHE_DIR:-$PWD/target/pip-cache}"
venv="${DAYTONA_TEST_VENV:-target/daytona-venv}"
venv_with "$venv" 'daytona' "daytona==$DAYTONA_VERSION"
installed=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("daytona"))')
if [[ "$installed" != "$DAYTONA_VERSION" ]]; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check "daytona==$DAYTONA_VERSION"
fi
bin=$(test_binary)
work=$(mktemp -d)
server=""
cleanup() {
    if [[ -n "$server" ]]; then kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; fi
    rm -rf "$work"
}
trap cleanup EXIT
work=$(realpath "$work")
( umask 077; echo "daytona-test-token-$$" > "$work/token" )
mkdir -p "$work/root"
port=$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin" serve --root "$work/root" --listen "daytona=127.0.0.1:$port" --token-file "$work/token" \
    --log-file "$work/serve.log" </dev/null >/dev/null 2>&1 &
server=$!
for _ in $(seq 100); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/api/sandbox/agent-reach" || true)
    [[ "$code" == 401 ]] && break
    sleep 0.1
done
echo "== daytona $DAYTONA_VERSION (Python) against $bin, daytona on 127.0.0.1:$port, --token-file"
timeout 300 "$venv/bin/python" tests/daytona/sdk_test.py "http://127.0.0.1:$port/api" "$work/root" "$(cat "$work/token")"

if ! command -v npm >/dev/null; then
    echo "SKIPPED daytona npm SDK: no npm on PATH"
    exit 0
fi
npm_dir="${DAYTONA_NPM_DIR:-$PWD/target/daytona-npm-$DAYTONA_NPM_VERSION}"
if [[ ! -f "$npm_dir/node_modules/@daytonaio/sdk/package.json" ]] \
    || ! grep -q "\"version\": \"$DAYTONA_NPM_VERSION\"" "$npm_dir/node_modules/@daytonaio/sdk/package.json"; then
    echo "== making $npm_dir with @daytonaio/sdk@$DAYTONA_NPM_VERSION"
    mkdir -p "$npm_dir"
    [[ -f "$npm_dir/package.json" ]] || echo '{"name":"daytona-npm-test","private":true}' > "$npm_dir/package.json"
    (cd "$npm_dir" && npm install --silent --no-audit --no-fund "@daytonaio/sdk@$DAYTONA_NPM_VERSION")
fi
echo "== @daytonaio/sdk $DAYTONA_NPM_VERSION (npm) against $bin, daytona on 127.0.0.1:$port, --token-file"
test_dir=$PWD/tests/daytona
(cd "$npm_dir" && timeout 300 node "$test_dir/npm_test.mjs" "http://127.0.0.1:$port/api" "$work/root" "$(cat "$work/token")")
