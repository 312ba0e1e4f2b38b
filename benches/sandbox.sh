#!/usr/bin/env bash
# Whole-process overhead of agent-reach-sandbox, measured side by side in one
# hyperfine run: bare `true` (the baseline), the sandbox with its default
# policy (workspace-write, network denied) in a plain directory and in a git
# repository root (the .git split), and bubblewrap's minimal confinement.
# Prints medians and ratios. Needs: hyperfine, bwrap (apt-get install -y
# bubblewrap hyperfine), python3. Usage: benches/sandbox.sh [RUNS]
set -euo pipefail
runs="${1:-500}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
cargo build --release --quiet --manifest-path "$repo/Cargo.toml"
work="$(mktemp -d "${TMPDIR:-/tmp}/ar-sandbox-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT
ln -s "$repo/target/release/agent-reach" "$work/agent-reach-sandbox"
mkdir -p "$work/plain" "$work/repo/.git/hooks" "$work/repo/src"
for n in $(seq 1 30); do : > "$work/repo/file$n"; done
sb="$work/agent-reach-sandbox"
commands=(
  "true"
  "$sb -- true"
  "$sb --cwd $work/repo -- true"
  "$sb --policy danger-full-access --network allow -- true"
)
names=("bare true" "sandbox (workspace-write, net deny)" "sandbox in a git repo root" "sandbox danger-full-access")
if command -v bwrap >/dev/null; then
  commands+=("bwrap --ro-bind / / --dev /dev true")
  names+=("bwrap --ro-bind / / --dev /dev")
fi
args=()
for i in "${!commands[@]}"; do args+=(-n "${names[$i]}" "${commands[$i]}"); done
cd "$work/plain"
hyperfine -N --warmup 50 --runs "$runs" --export-json "$work/result.json" "${args[@]}" >/dev/null
python3 - "$work/result.json" <<'PY'
import json, statistics, sys
results = json.load(open(sys.argv[1]))["results"]
base = statistics.median(results[0]["times"])
bwrap = next((statistics.median(r["times"]) for r in results if r["command"].startswith("bwrap")), None)
print(f"{'command':40} {'median':>9} {'over bare':>10} {'x bare':>7} {'x bwrap':>8}")
for r in results:
    m = statistics.median(r["times"])
    vs_bwrap = f"{m / bwrap:8.2f}" if bwrap else "       -"
    print(f"{r['command']:40} {m*1e3:7.3f}ms {(m-base)*1e3:8.3f}ms {m/base:7.2f} {vs_bwrap}")
PY
