#!/usr/bin/env bash
# Drives `agent-reach serve --listen mcp=127.0.0.1:0` with the published
# Python clients from PyPI: the official `mcp` SDK's streamable HTTP client,
# langchain-mcp-adapters (transport "streamable_http") and the OpenAI Agents
# SDK (MCPServerStreamableHttp, no model). Makes (once) a virtualenv under
# target/, builds the binary if needed, runs client_test.py under a hard
# timeout, and exits non-zero if any check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="${MCP_HTTP_TEST_VENV:-target/mcp-http-venv}"
python="${PYTHON:-python3}"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import mcp, langchain_mcp_adapters, agents' 2>/dev/null; then
    echo "== making $venv with mcp, langchain-mcp-adapters and openai-agents"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        'mcp>=1.9' 'langchain-mcp-adapters>=0.1' 'openai-agents>=0.1'
fi
bin="${AGENT_REACH_BIN:-target/debug/agent-reach}"
if [[ -z "${AGENT_REACH_BIN:-}" ]]; then
    cargo build --quiet --bin agent-reach
fi
echo "== python clients over streamable HTTP against $bin"
exec timeout 300 "$venv/bin/python" tests/mcp_http/client_test.py "$bin"
