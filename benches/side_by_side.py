"""Two or more builds of the server measured side by side, all alive at once:
each build is started as an MCP server on stdio and as a
`sandboxd-grpc` listener, and the same calls go to each in turn, in blocks
(50 calls), the order of the builds swapped block by block. A change of
the machine's speed (it moves by +-30 % within minutes here) then hits
every build alike, which alternating whole runs does not guarantee.

Measured, for each build:
- MCP `exec_command` of `true` over stdio, one call at a time (ms);
- the same with 8 and 32 calls in flight on the one connection (calls/s);
- `Execute` of `/bin/true` through grpcio, one call at a time (ms), when
  grpcio can be imported (benches/side_by_side.sh makes a venv with it).

Prints each figure's median per build and its ratio to the first build
given (the baseline). Asserts nothing.

Usage: python benches/side_by_side.py [--blocks N] BASELINE BIN [BIN...]
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "common"))
from grpc_wire import start_request  # noqa: E402

BLOCK = 50
RATE_CALLS = 320
EXEC_TRUE = {"name": "exec_command", "arguments": {"cmd": "true"}}


def environment(work):
    return {"PATH": "/usr/bin:/bin", "HOME": work, "SHELL": "/bin/bash",
            "AGENT_REACH_HOME": os.path.join(work, "home"), "AGENT_REACH_LOG": "warn"}


class Mcp:
    """An MCP server on stdio, answered one JSON line at a time."""

    def __init__(self, binary, work):
        self.proc = subprocess.Popen([binary, "serve", "--root", work], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=work,
                                     env=environment(work))
        self.next_id = 0
        self.call("initialize", {"protocolVersion": "2025-03-26", "capabilities": {},
                                 "clientInfo": {"name": "side_by_side", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def request(self, method, params):
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        return self.next_id

    def answer(self):
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit("an MCP server ended")
            message = json.loads(line)
            if "id" in message:
                if "error" in message or message.get("result", {}).get("isError"):
                    raise SystemExit(f"an MCP call failed: {message}")
                return message

    def call(self, method, params):
        self.request(method, params)
        return self.answer()

    def round_trip(self):
        start = time.perf_counter()
        self.call("tools/call", EXEC_TRUE)
        return time.perf_counter() - start

    def rate(self, in_flight):
        sent = answered = 0
        start = time.perf_counter()
        while answered < RATE_CALLS:
            while sent < RATE_CALLS and sent - answered < in_flight:
                self.request("tools/call", EXEC_TRUE)
                sent += 1
            self.answer()
            answered += 1
        return RATE_CALLS / (time.perf_counter() - start)

    def stop(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


class Grpc:
    """A `sandboxd-grpc` listener and a grpcio channel to it."""

    def __init__(self, binary, work, grpc):
        log_path = os.path.join(work, "grpc.log")
        self.log = open(log_path, "w+")
        self.proc = subprocess.Popen([binary, "serve", "--listen", "sandboxd-grpc=127.0.0.1:0",
                                      "--root", work], stdout=subprocess.DEVNULL,
                                     stderr=self.log, cwd=work, env=environment(work))
        port = None
        for _ in range(400):
            self.log.seek(0)
            found = re.search(r'"addr":"127\.0\.0\.1:(\d+)"', self.log.read())
            if found:
                port = int(found.group(1))
                break
            time.sleep(0.05)
        if port is None:
            raise SystemExit(f"{binary} did not listen (see {log_path})")
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.execute = self.channel.unary_unary("/process.v1.ProcessService/Execute")
        self.request = start_request("/bin/true")

    def round_trip(self):
        start = time.perf_counter()
        self.execute(self.request)
        return time.perf_counter() - start

    def stop(self):
        self.channel.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)


def side_by_side(servers, blocks, one_block):
    """`one_block(server)` for each server in turn, `blocks` times, the
    order swapped each time; every sample kept per server."""
    samples = [[] for _ in servers]
    order = list(range(len(servers)))
    for block in range(blocks):
        for i in (order if block % 2 == 0 else order[::-1]):
            samples[i].extend(one_block(servers[i]))
    return samples


def report(title, names, samples, unit, scale):
    medians = [statistics.median(s) * scale for s in samples]
    print(f"{title}:")
    for name, median, s in zip(names, medians, samples):
        print(f"  {name}: median {median:.3f} {unit} ({len(s)} samples), ratio to the baseline {median / medians[0]:.3f}")


def round_trips(title, names, servers, blocks):
    """Warms each server up, then reports its round trips side by side."""
    for server in servers:
        for _ in range(20):
            server.round_trip()
    report(title, names,
           side_by_side(servers, blocks, lambda s: [s.round_trip() for _ in range(BLOCK)]),
           "ms", 1e3)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("binaries", nargs="+")
    args = parser.parse_args()
    if len(args.binaries) < 2:
        raise SystemExit("give a baseline build and at least one build to compare")
    names = [f"{i}:{b}" for i, b in enumerate(args.binaries)]
    works = [tempfile.mkdtemp(prefix="side-by-side-") for _ in args.binaries]
    try:
        mcps = [Mcp(b, w) for b, w in zip(args.binaries, works)]
        round_trips("MCP exec_command `true` over stdio, one at a time", names, mcps, args.blocks)
        for in_flight in (8, 32):
            report(f"the same, {in_flight} in flight ({RATE_CALLS} calls a sample)", names,
                   side_by_side(mcps, max(args.blocks // 4, 4), lambda m: [m.rate(in_flight)]),
                   "calls/s", 1)
        for mcp in mcps:
            mcp.stop()
        try:
            import grpc
        except ImportError:
            print("grpcio is not installed here: the Execute figure is left out "
                  "(benches/side_by_side.sh makes a venv with it)")
            return
        servers = [Grpc(b, w, grpc) for b, w in zip(args.binaries, works)]
        round_trips("sandboxd-grpc Execute `/bin/true` through grpcio, one at a time", names,
                    servers, args.blocks)
        for server in servers:
            server.stop()
    finally:
        for work in works:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
