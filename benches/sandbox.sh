#!/usr/bin/env bash
# Whole-process overhead of agent-reach-sandbox, measured side by side in one
# run: bare `true` (the baseline), the sandbox's default policy
# (workspace-write, network denied) in a plain directory and in a git
# repository root (.git read-only), danger-full-access (seccomp only), and
# bubblewrap's minimal confinement `bwrap --ro-bind / / --dev /dev true`.
#
# Runs are interleaved round-robin (one of each command per round), so load
# from other processes hits every command alike; a shared machine still
# widens the spread. Reports the median wall time and the median CPU time
# (user+sys, from wait4) of each, the difference to bare `true` and the
# ratios to bare `true` and to bwrap.
#
# Needs python3; bwrap is optional (apt-get install -y bubblewrap).
# Usage: benches/sandbox.sh [ROUNDS]   (default 400)
set -euo pipefail
rounds="${1:-400}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
built="${AGENT_REACH_BIN:-$("$repo/install.sh" --build-only 2>/dev/null)}" # the shipped (static) build, or the one named
work="$(mktemp -d "${TMPDIR:-/tmp}/ar-sandbox-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# Measured as installed, a copy as install.sh makes (see benches/exec.sh).
install -m 0755 "$built" "$work/agent-reach"
ln -s "$work/agent-reach" "$work/agent-reach-sandbox"
mkdir -p "$work/plain" "$work/repo/.git/hooks" "$work/repo/src"
for n in $(seq 1 30); do : > "$work/repo/file$n"; done
cd "$work/plain"
python3 - "$rounds" "$work" <<'PY'
import os, shutil, statistics, sys, time

rounds, work = int(sys.argv[1]), sys.argv[2]
sb = f"{work}/agent-reach-sandbox"
true = shutil.which("true")
cases = [
    ("bare true", [true]),
    ("sandbox workspace-write, net deny", [sb, "--", true]),
    ("sandbox in a git repo root", [sb, "--cwd", f"{work}/repo", "--", true]),
    ("sandbox danger-full-access", [sb, "--policy", "danger-full-access", "--network", "allow", "--", true]),
]
bwrap = shutil.which("bwrap")
if bwrap:
    cases.append(("bwrap --ro-bind / / --dev /dev", [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", true]))

def run(argv):
    start = time.perf_counter_ns()
    pid = os.posix_spawn(argv[0], argv, os.environ)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter_ns() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {argv}")
    return wall / 1e6, (usage.ru_utime + usage.ru_stime) * 1e3

for _ in range(20):
    for _, argv in cases:
        run(argv)
walls = {name: [] for name, _ in cases}
cpus = {name: [] for name, _ in cases}
for _ in range(rounds):
    for name, argv in cases:
        w, c = run(argv)
        walls[name].append(w)
        cpus[name].append(c)
med = {n: statistics.median(v) for n, v in walls.items()}
cpu = {n: statistics.median(v) for n, v in cpus.items()}
base = med["bare true"]
ref = med.get("bwrap --ro-bind / / --dev /dev")
print(f"{rounds} interleaved rounds, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
print(f"{'command':36} {'wall':>9} {'over bare':>10} {'x bare':>7} {'x bwrap':>8} {'cpu':>9}")
for name, _ in cases:
    m = med[name]
    vs = f"{m / ref:8.2f}" if ref else "       -"
    print(f"{name:36} {m:7.3f}ms {m - base:8.3f}ms {m / base:7.2f} {vs} {cpu[name]:7.3f}ms")
PY
