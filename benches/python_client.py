#!/usr/bin/env python3
"""The Python client's cost: `Client.batch` of 10,000 `true` requests
against the same requests driven straight through `exec --jsonl` by
benches/exec_jsonl.py's driver (same binary, registry and concurrency),
interleaved round by round.

Prints each side's requests/s, and the client's cost: how much of the
driver's rate it loses (goal: under 20 %).

usage: benches/python_client.py [--bin target/dist/agent-reach] [-n 10000] [-c 24] [--rounds 3]
(`agent_reach` is imported from python/ unless it is installed.)
"""

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

from agent_reach import Client  # noqa: E402

spec = importlib.util.spec_from_file_location("exec_jsonl", os.path.join(HERE, "exec_jsonl.py"))
exec_jsonl = importlib.util.module_from_spec(spec)
spec.loader.exec_module(exec_jsonl)


def client_rate(binary, n, concurrency, workdir):
    config = exec_jsonl.write_registry(workdir, concurrency)
    env = {"HOME": workdir, "AGENT_REACH_HOME": os.path.join(workdir, "ar-home")}
    requests = [{"id": i, "tool": "noop"} for i in range(n)]
    with Client(config, root=workdir, binary=binary, env=env, max_in_flight=concurrency) as client:
        client.run("noop")  # the process is up before the clock starts
        start = time.monotonic()
        results = client.batch(requests)
        elapsed = time.monotonic() - start
    errors = sum(1 for r in results if not r.ok)
    return n / elapsed, errors


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
        with tempfile.TemporaryDirectory() as workdir:
            elapsed, latencies, statuses, _ = exec_jsonl.run_agent_reach(binary, args.n, args.c, workdir)
        driver = len(latencies) / elapsed
        with tempfile.TemporaryDirectory() as workdir:
            client, errors = client_rate(binary, args.n, args.c, workdir)
        cost = 1 - client / driver
        rows.append((driver, client, cost))
        print(
            f"round {round_no + 1}: exec --jsonl driver {driver:8.0f}/s  Client.batch {client:8.0f}/s  "
            f"client cost {cost:6.1%}  errors {errors}  driver statuses {statuses}",
            flush=True,
        )
    med = lambda i: statistics.median(r[i] for r in rows)
    print(
        f"median of {len(rows)}: driver {med(0):.0f}/s, Client.batch {med(1):.0f}/s, "
        f"client cost {med(2):.1%} of the rate (goal < 20 %)"
    )


if __name__ == "__main__":
    sys.exit(main())
