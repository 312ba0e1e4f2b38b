#!/usr/bin/env bash
# Drives `agent-reach serve` with the official Python MCP SDK from PyPI.
# Makes (once) a virtualenv under target/, installs `mcp` into it, builds the
# binary if needed, and runs client_test.py. Exits non-zero if any check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="${MCP_TEST_VENV:-target/mcp-venv}"
python="${PYTHON:-python3}"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import mcp' 2>/dev/null; then
    echo "== making $venv with the mcp SDK"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'mcp>=1.9,<2'
fi
bin="${AGENT_REACH_BIN:-target/debug/agent-reach}"
if [[ -z "${AGENT_REACH_BIN:-}" ]]; then
    cargo build --quiet --bin agent-reach
fi
echo "== python MCP client against $bin"
exec timeout 300 "$venv/bin/python" tests/mcp/client_test.py "$bin"
