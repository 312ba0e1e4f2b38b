#!/usr/bin/env python3
"""Whole-process benchmark of `agent-reach exec --jsonl`.

10,000 requests for a trivial registry tool (`true`), kept 24 in flight by
this driver (closed loop: a new request leaves as soon as a result comes
back), against the raw spawn rate of the same command at the same
concurrency measured in the same run (`xargs -P 24 -n 1 true`).

Prints sustained requests/s, p50/p99 latency (send -> result line), errors,
the ratio to the raw spawn rate, and agent-reach's RSS early and late (flat
memory = no leak per request).

usage: benches/exec_jsonl.py [--bin target/dist/agent-reach] [-n 10000] [-c 24]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def raw_rate(n, concurrency):
    start = time.monotonic()
    subprocess.run(
        ["xargs", "-P", str(concurrency), "-n", "1", "true"],
        input="\n".join(str(i) for i in range(n)).encode(),
        check=True,
    )
    return n / (time.monotonic() - start)


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def write_registry(workdir, concurrency):
    """The registry both benchmarks run: one `noop` tool (`true`), the
    scheduler sized for `concurrency` in flight."""
    config = os.path.join(workdir, "registry.toml")
    with open(config, "w") as f:
        f.write(
            f"""[scheduler]
global = {concurrency}
queue = {concurrency * 8}

[[tools]]
name = "noop"
command = ["true"]
cwd = "project_root"
risk = "low"
timeout = 10
"""
        )
    return config


def run_agent_reach(binary, n, concurrency, workdir):
    config = write_registry(workdir, concurrency)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": workdir,
        "AGENT_REACH_HOME": os.path.join(workdir, "ar-home"),
        "LANG": "C.UTF-8",
    }
    proc = subprocess.Popen(
        [binary, "exec", "--jsonl", "--config", config, "--root", workdir],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd=workdir,
        bufsize=0,
    )
    slots = threading.Semaphore(concurrency)
    sent_at = {}
    latencies = []
    statuses = {}
    rss = []
    done = threading.Event()

    def reader():
        for line in proc.stdout:
            now = time.monotonic()
            result = json.loads(line)
            rid = result["id"]
            latencies.append(now - sent_at[rid])
            statuses[result["status"]] = statuses.get(result["status"], 0) + 1
            slots.release()
            if len(latencies) == n:
                break
        done.set()

    def sampler():
        while not done.is_set():
            rss.append((len(latencies), rss_kib(proc.pid)))
            time.sleep(0.05)

    threading.Thread(target=reader, daemon=True).start()
    threading.Thread(target=sampler, daemon=True).start()
    start = time.monotonic()
    for i in range(n):
        slots.acquire()
        sent_at[i] = time.monotonic()
        proc.stdin.write(b'{"id": %d, "tool": "noop"}\n' % i)
    done.wait(timeout=600)
    elapsed = time.monotonic() - start
    proc.stdin.close()
    proc.wait(timeout=60)
    return elapsed, latencies, statuses, rss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default="target/dist/agent-reach")
    parser.add_argument("-n", type=int, default=10_000)
    parser.add_argument("-c", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    binary = os.path.abspath(args.bin)
    rows = []
    for round_no in range(args.rounds):
        raw = raw_rate(args.n, args.c)
        with tempfile.TemporaryDirectory() as workdir:
            elapsed, latencies, statuses, rss = run_agent_reach(binary, args.n, args.c, workdir)
        rate = len(latencies) / elapsed
        latencies.sort()
        p50 = statistics.median(latencies) * 1000
        p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000
        samples = [kib for _, kib in rss if kib]
        early = samples[len(samples) // 10] if samples else None
        late = samples[-1] if samples else None
        errors = sum(v for k, v in statuses.items() if k != "success")
        rows.append((raw, rate, p50, p99, errors, early, late))
        print(
            f"round {round_no + 1}: raw {raw:8.0f}/s  agent-reach {rate:8.0f}/s  "
            f"ratio {rate / raw:5.1%}  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  "
            f"errors {errors}  rss {early} -> {late} KiB  statuses {statuses}",
            flush=True,
        )
    med = lambda i: statistics.median(r[i] for r in rows)
    print(
        f"median of {len(rows)}: raw {med(0):.0f}/s, agent-reach {med(1):.0f}/s "
        f"({med(1) / med(0):.1%} of raw), p50 {med(2):.2f} ms, p99 {med(3):.2f} ms, "
        f"errors {sum(r[4] for r in rows)}"
    )


if __name__ == "__main__":
    sys.exit(main())
