#!/usr/bin/env bash
# tests/python/run.sh: the wheel as a Python user gets it. Builds the wheel
# with maturin (pip-installed into target/py-build), installs it into a
# fresh venv (target/py-test) with pytest, langchain-core and langgraph,
# and runs tests/python/test_*.py against the `agent-reach` the wheel put
# on that venv's PATH. Exits non-zero on any failed check.
#
#   tests/python/run.sh [WHEEL]      (default: build one)
# WHEEL_PROFILE=dev builds a debug wheel (faster to build) instead of the
# pyproject's `dist` profile.
set -euo pipefail
cd "$(dirname "$0")/../.."
python="${PYTHON:-python3}"
build_venv=target/py-build
test_venv=target/py-test
wheels=target/wheels

if [[ $# -gt 0 ]]; then
    wheel=$1
else
    if [[ ! -x "$build_venv/bin/maturin" ]]; then
        echo "== making $build_venv with maturin"
        "$python" -m venv "$build_venv"
        "$build_venv/bin/pip" install --quiet --disable-pip-version-check 'maturin>=1.5,<2'
    fi
    profile_flag=()
    if [[ -n "${WHEEL_PROFILE:-}" ]]; then profile_flag=(--profile "$WHEEL_PROFILE"); fi
    rm -rf "$wheels"
    echo "== maturin build --locked ${profile_flag[*]}"
    timeout 3000 "$build_venv/bin/maturin" build --locked --out "$wheels" "${profile_flag[@]}" >&2
    wheel=$(ls "$wheels"/agent_reach_runtime-*.whl | head -1)
fi
echo "== a fresh venv with $wheel"
rm -rf "$test_venv"
"$python" -m venv "$test_venv"
"$test_venv/bin/pip" install --quiet --disable-pip-version-check \
    "$wheel" 'pytest>=7' 'langchain-core>=0.3' 'langgraph>=0.2'
echo "== pytest tests/python"
cd tests/python
# No AGENT_REACH_BIN: the tests use the command the wheel installed.
exec env -u AGENT_REACH_BIN timeout 900 "../../$test_venv/bin/python" -m pytest -q -p no:cacheprovider .
