#!/usr/bin/env bash
# The real Codex CLI against `agent-reach serve --listen codex-exec` and
# `serve --stdio codex-exec`: downloads (once, cached under
# target/codex-cache/) the pinned npm release, @openai/codex and its Linux
# platform package (the binary ships in the optional dependency
# @openai/codex-linux-x64, an alias of @openai/codex@VERSION-linux-x64, under
# vendor/<triple>/bin/codex), builds the binary if needed, and runs
# codex_test.py: a scripted model (mock_model.py, Responses API over SSE)
# whose turns call exec_command and apply_patch, asserted on what the model
# receives back. Exits non-zero if any check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/common/python.sh
# The Codex release the door speaks (src/doors/codex_exec/mod.rs,
# CODEX_PACKAGE): change both together.
CODEX_VERSION=0.171.0
grep -q "@openai/codex@$CODEX_VERSION\"" src/doors/codex_exec/mod.rs || {
    echo "tests/codex/run.sh pins $CODEX_VERSION but src/doors/codex_exec/mod.rs does not" >&2
    exit 1
}
case "$(uname -m)" in
    x86_64) platform=linux-x64 triple=x86_64-unknown-linux-musl ;;
    aarch64) platform=linux-arm64 triple=aarch64-unknown-linux-musl ;;
    *) echo "SKIPPED tests/codex/run.sh: no Codex build for $(uname -m)" >&2; exit 0 ;;
esac
cache="${CODEX_CACHE:-$PWD/target/codex-cache}/$CODEX_VERSION"
codex="$cache/$platform/package/vendor/$triple/bin/codex"
if [[ ! -x "$codex" ]]; then
    mkdir -p "$cache"
    ( cd "$cache" && npm pack --silent "@openai/codex@$CODEX_VERSION" "@openai/codex@$CODEX_VERSION-$platform" >/dev/null )
    mkdir -p "$cache/$platform" "$cache/main"
    tar -xzf "$cache/openai-codex-$CODEX_VERSION-$platform.tgz" -C "$cache/$platform"
    tar -xzf "$cache/openai-codex-$CODEX_VERSION.tgz" -C "$cache/main"
    grep -q "\"@openai/codex-$platform\": \"npm:@openai/codex@$CODEX_VERSION-$platform\"" \
        "$cache/main/package/package.json" || {
        echo "@openai/codex@$CODEX_VERSION no longer ships its binary as @openai/codex-$platform" >&2
        exit 1
    }
fi
"$codex" --version | grep -qx "codex-cli $CODEX_VERSION"
bin=$(realpath "$(test_binary)")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "== codex-cli $CODEX_VERSION (npm, $platform) with $bin as its exec-server, over WebSocket and stdio"
timeout 900 python3 tests/codex/codex_test.py "$codex" "$bin" "$(realpath "$work")"
