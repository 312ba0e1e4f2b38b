#!/usr/bin/env bash
# Whole-process benchmarks of the exec engine (issue 3, item 7), each against
# a baseline measured in the same run:
#   1. latency: `agent-reach run -- true` vs a bare fork+exec of `true`
#      (benches/exec_forkexec.c), goal < 1 ms added;
#   2. throughput: `yes | head -c 1G` drained through `run` vs the same
#      pipeline into `cat >/dev/null`, goal > 80 %, with agent-reach's peak
#      RSS < 32 MiB.
# Needs hyperfine and a C compiler; builds the release binary.
# Usage: benches/exec.sh [RUNS]   (prints medians and ratios; tp_rounds=N
# sets the throughput rounds, default 12)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-200}
bin=$(./install.sh --build-only 2>/dev/null) # the shipped (static) build
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export AGENT_REACH_HOME=$work/home
cc -O2 -o "$work/forkexec" benches/exec_forkexec.c

median() { # hyperfine JSON -> median seconds of command $2
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][int(sys.argv[2])]["median"])' "$1" "$2"
}

echo "== latency: run -- true vs fork+exec true ($runs runs each)"
hyperfine -N --warmup 20 --runs "$runs" --export-json "$work/lat.json" \
  "$work/forkexec true" "$bin run -- true" >/dev/null
# The subreaper-only fallback, with the variable in hyperfine's environment
# (an `env` wrapper would add an exec to the figure).
AGENT_REACH_NO_CGROUP=1 hyperfine -N --warmup 20 --runs "$runs" --export-json "$work/nocg.json" \
  "$work/forkexec true" "$bin run -- true" >/dev/null
base=$(median "$work/lat.json" 0); run=$(median "$work/lat.json" 1)
base2=$(median "$work/nocg.json" 0); nocg=$(median "$work/nocg.json" 1)
python3 - "$base" "$run" "$base2" "$nocg" <<'PY'
import sys
base, run, base2, nocg = map(float, sys.argv[1:])
print(f"fork+exec true      median {base*1e3:7.3f} ms")
print(f"run -- true         median {run*1e3:7.3f} ms  added {(run-base)*1e3:6.3f} ms  ratio {run/base:5.2f}x")
print(f"run (no cgroup)     median {nocg*1e3:7.3f} ms  added {(nocg-base2)*1e3:6.3f} ms  ratio {nocg/base2:5.2f}x  (its own baseline {base2*1e3:.3f} ms)")
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
