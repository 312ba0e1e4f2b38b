#!/usr/bin/env bash
# Drives `agent-reach serve --listen mcp=127.0.0.1:0` with the published
# Python clients from PyPI: the official `mcp` SDK's streamable HTTP client,
# langchain-mcp-adapters (transport "streamable_http") and the OpenAI Agents
# SDK (MCPServerStreamableHttp, no model). Makes (once) a virtualenv under
# target/, builds the binary if needed, runs client_test.py under a hard
# timeout, and exits non-zero if any check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/common/python.sh
venv="${MCP_HTTP_TEST_VENV:-target/mcp-http-venv}"
venv_with "$venv" 'mcp, langchain_mcp_adapters, agents' 'mcp>=1.9' 'langchain-mcp-adapters>=0.1' 'openai-agents>=0.1'
bin=$(test_binary)
echo "== python clients over streamable HTTP against $bin"
timeout 300 "$venv/bin/python" tests/mcp_http/client_test.py "$bin"
# The SDK's 2.x line, which langchain-mcp-adapters and openai-agents do not
# take yet: the SDK's own checks.
venv2="${MCP2_TEST_VENV:-target/mcp2-venv}"
venv_with "$venv2" 'mcp, httpx2' 'mcp>=2,<3'
exec timeout 300 "$venv2/bin/python" tests/mcp_http/client_test.py "$bin" --sdk-only
