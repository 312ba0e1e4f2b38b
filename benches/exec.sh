#!/usr/bin/env bash
# Whole-process benchmarks of the exec engine (issue 3, item 7), each against
# a baseline measured in the same run:
#   1. latency: `agent-reach run -- true` vs a bare fork+exec of `true`
#      (benches/exec_forkexec.c), goal < 1 ms added;
#   2. throughput: `yes | head -c 1G` drained through `run` vs the same
#      pipeline into `cat >/dev/null`, goal > 80 %, with agent-reach's peak
#      RSS < 32 MiB.
# Needs python3 and a C compiler; builds the release binary.
# Usage: benches/exec.sh [RUNS]   (prints medians and ratios; tp_rounds=N
# sets the throughput rounds, default 12)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-400}
built=${AGENT_REACH_BIN:-$(./install.sh --build-only 2>/dev/null)} # the shipped (static) build, or the one named
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Measured as installed: a copy, as install.sh makes one. The linker's own
# output file starts measurably slower (here ~35 more page faults a start,
# 0.1-0.4 ms), the same bytes written piecemeal lying differently in the
# page cache.
bin=$work/agent-reach
install -m 0755 "$built" "$bin"
export AGENT_REACH_HOME=$work/home
cc -O2 -o "$work/forkexec" benches/exec_forkexec.c

echo "== latency: run -- true vs fork+exec true ($runs interleaved rounds)"
# Interleaved, one of each command per round (as benches/sandbox.sh does):
# this machine's speed drifts by 10-20 % over a minute, and runs in a row
# (hyperfine's way) put each command in different conditions.
python3 - "$runs" "$work/forkexec" "$bin" <<'PY'
import os, statistics, sys, time
rounds, forkexec, bin = int(sys.argv[1]), sys.argv[2], sys.argv[3]
devnull = os.open(os.devnull, os.O_WRONLY)
env = dict(os.environ)
nocg = dict(env, AGENT_REACH_NO_CGROUP="1")
cases = [
    ("fork+exec true", [forkexec, "true"], env),
    ("run -- true", [bin, "run", "--", "true"], env),
    ("run (no cgroup)", [bin, "run", "--", "true"], nocg),
]
def once(argv, environ):
    start = time.perf_counter_ns()
    pid = os.posix_spawn(argv[0], argv, environ, file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1)])
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {argv}")
    return (time.perf_counter_ns() - start) / 1e6
for _ in range(20):
    for _, argv, environ in cases:
        once(argv, environ)
times = {name: [] for name, _, _ in cases}
for _ in range(rounds):
    for name, argv, environ in cases:
        times[name].append(once(argv, environ))
base = statistics.median(times["fork+exec true"])
for name, _, _ in cases:
    m = statistics.median(times[name])
    print(f"{name:19} median {m:7.3f} ms  added {m - base:6.3f} ms  ratio {m / base:5.2f}x")
PY

echo "== throughput: yes | head -c 1G through run vs into cat (${tp_rounds:=12} interleaved rounds)"
# Interleaved rather than hyperfine's runs in a row: the pipeline's own speed
# drifts by 10-20 % over a minute on this kind of machine, and alternating
# puts both sides in the same conditions.
pipeline='yes "some log line of a build, 40 bytes..." | head -c 1073741824'
peak_kb=$( { /usr/bin/time -f '%M' "$bin" run --timeout-ms 0 -- sh -c "$pipeline" >/dev/null; } 2>&1 | tail -1)
python3 - "$bin" "$pipeline" "$tp_rounds" "$peak_kb" <<'PY'
import statistics, subprocess, sys, time
bin, pipeline, rounds, peak = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
cases = {
    "cat": ["sh", "-c", pipeline + " | cat >/dev/null"],
    "run": [bin, "run", "--timeout-ms", "0", "--", "sh", "-c", pipeline],
}
times = {name: [] for name in cases}
for _ in range(rounds):
    for name, argv in cases.items():
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
        times[name].append(time.perf_counter() - start)
cat_s, run_s = (statistics.median(times[n]) for n in ("cat", "run"))
gib = 1073741824 / 2**20
print(f"into cat            median {cat_s:6.3f} s  {gib/cat_s:7.1f} MiB/s")
print(f"through run         median {run_s:6.3f} s  {gib/run_s:7.1f} MiB/s  = {100*cat_s/run_s:5.1f} % of cat")
print(f"agent-reach peak RSS {peak/1024:.1f} MiB")
PY
