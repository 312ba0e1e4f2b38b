#!/usr/bin/env bash
# Drives `agent-reach serve` as the in-pod runtime of kubernetes-sigs/agent-sandbox
# with its published Python client (`k8s-agent-sandbox` from PyPI, with the
# grpc extra), the control plane stubbed. Makes (once) a virtualenv under
# target/, builds the binary if needed, runs client_test.py. Exits non-zero
# if any check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="${AGENT_SANDBOX_TEST_VENV:-target/agent-sandbox-venv}"
python="${PYTHON:-python3}"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import k8s_agent_sandbox, grpc' 2>/dev/null; then
    echo "== making $venv with k8s-agent-sandbox[grpc]"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'k8s-agent-sandbox[grpc]>=1.0.8,<1.1'
fi
bin="${AGENT_REACH_BIN:-target/debug/agent-reach}"
if [[ -z "${AGENT_REACH_BIN:-}" ]]; then
    cargo build --quiet --bin agent-reach
fi
echo "== k8s-agent-sandbox client against $bin"
exec timeout 300 "$venv/bin/python" tests/agent_sandbox/client_test.py "$bin"
