#!/usr/bin/env bash
# agent-reach's swerex-remote against the original from PyPI, same run,
# same client (see benches/swerex_remote.py). Uses the release binary
# unless AGENT_REACH_BIN is set; extra arguments go to the Python script.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${SWEREX_TEST_VENV:-target/swerex-venv}"
if [[ ! -x "$venv/bin/swerex-remote" ]] || ! "$venv/bin/python" -c 'import swerex, aiohttp' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'swe-rex>=1.4,<2' aiohttp
fi
bin="${AGENT_REACH_BIN:-target/release/agent-reach}"
if [[ -z "${AGENT_REACH_BIN:-}" ]]; then
    cargo build --quiet --release --bin agent-reach
fi
links="target/swerex-bench-links"
mkdir -p "$links"
ln -sf "$(realpath "$bin")" "$links/swerex-remote"
exec timeout 1800 "$venv/bin/python" benches/swerex_remote.py "$(cd "$links" && pwd)/swerex-remote" "$(realpath "$venv/bin/swerex-remote")" "$@"
