#!/usr/bin/env bash
# Drives `agent-reach serve` with the official Python MCP SDK from PyPI.
# Makes (once) two virtualenvs under target/, one with the SDK's 1.x line and
# one with its 2.x line, builds the binary if needed, and runs client_test.py
# in each. Exits non-zero if any check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/common/python.sh
venv="${MCP_TEST_VENV:-target/mcp-venv}"
venv_with "$venv" 'mcp' 'mcp>=1.9,<2'
bin=$(test_binary)
echo "== python MCP client against $bin"
timeout 300 "$venv/bin/python" tests/mcp/client_test.py "$bin"
# The SDK's 2.x line (a new HTTP package, snake-case fields), the same checks.
venv2="${MCP2_TEST_VENV:-target/mcp2-venv}"
venv_with "$venv2" 'mcp, httpx2' 'mcp>=2,<3'
exec timeout 300 "$venv2/bin/python" tests/mcp/client_test.py "$bin"
