#!/usr/bin/env bash
# Drives `agent-reach serve` with the official Python MCP SDK from PyPI.
# Makes (once) a virtualenv under target/, installs `mcp` into it, builds the
# binary if needed, and runs client_test.py. Exits non-zero if any check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/common/python.sh
venv="${MCP_TEST_VENV:-target/mcp-venv}"
venv_with "$venv" 'mcp' 'mcp>=1.9,<2'
bin=$(test_binary)
echo "== python MCP client against $bin"
exec timeout 300 "$venv/bin/python" tests/mcp/client_test.py "$bin"
