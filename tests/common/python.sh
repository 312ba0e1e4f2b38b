# Sourced by the tests/*/run.sh scripts that drive agent-reach with a
# published Python client: the virtualenv under target/ and the binary
# under test, made the same way for each.

# venv_with VENV IMPORTS SPEC...: makes VENV once, with the pip SPECs
# installed; made again when `import IMPORTS` fails in it.
venv_with() {
    local venv=$1 imports=$2
    shift 2
    if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c "import $imports" 2>/dev/null; then
        return 0
    fi
    echo "== making $venv with $*"
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$@"
}

# test_binary: prints the binary under test, $AGENT_REACH_BIN or the debug
# build (built first when AGENT_REACH_BIN is unset).
test_binary() {
    if [[ -n "${AGENT_REACH_BIN:-}" ]]; then
        echo "$AGENT_REACH_BIN"
        return 0
    fi
    cargo build --quiet --bin agent-reach >&2
    echo target/debug/agent-reach
}
