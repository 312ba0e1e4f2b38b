#!/usr/bin/env bash
# `process.exec("true")` through Daytona's Python SDK against agent-reach's
# daytona listener, beside python-runtime's `/execute` of the same server
# and a bare fork+exec, same run (see benches/daytona_exec.py, not named
# daytona.py, which would shadow the SDK). Uses the release binary unless
# AGENT_REACH_BIN is set; extra arguments (`--calls N`, 200) go to the
# script.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/common/python.sh
venv="${DAYTONA_TEST_VENV:-target/daytona-venv}"
venv_with "$venv" 'daytona' 'daytona==0.226.1'
bin="${AGENT_REACH_BIN:-target/release/agent-reach}"
if [[ -z "${AGENT_REACH_BIN:-}" ]]; then
    cargo build --quiet --release --bin agent-reach
fi
exec timeout 1800 "$venv/bin/python" benches/daytona_exec.py "$(realpath "$bin")" "$@"
