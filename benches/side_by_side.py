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
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "common"))
sys.path.insert(0, os.path.join(here, "common"))
from grpc_wire import start_request  # noqa: E402
from loopback import free_port, interleaved, stop, timed, wait_for  # noqa: E402

BLOCK = 50
RATE_CALLS = 320
WARM_UP = 20
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

    def round_trips(self, n):
        return timed(n, lambda: self.call("tools/call", EXEC_TRUE), lambda _: True)

    def rates(self, in_flight):
        """`f(n)`: `n` samples of calls per second, `in_flight` kept going."""
        return lambda n: [self.rate(in_flight) for _ in range(n)]

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
        port = free_port()
        self.proc = subprocess.Popen([binary, "serve", "--listen", f"sandboxd-grpc=127.0.0.1:{port}",
                                      "--root", work], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, cwd=work, env=environment(work))
        wait_for(port)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        execute = self.channel.unary_unary("/process.v1.ProcessService/Execute")
        request = start_request("/bin/true")
        self.call = lambda: execute(request)

    def round_trips(self, n):
        return timed(n, self.call, lambda _: True)

    def stop(self):
        self.channel.close()
        stop(self.proc)


def report(title, names, samples, unit, scale):
    medians = [statistics.median(samples[name]) * scale for name in names]
    print(f"{title}:")
    for name, median in zip(names, medians):
        print(f"  {name}: median {median:.3f} {unit} ({len(samples[name])} samples), "
              f"ratio to the baseline {median / medians[0]:.3f}")


def side_by_side(names, servers, calls, block, measure):
    """`measure(server)(n)` of every server, in blocks taking turns."""
    return interleaved(calls, block, {name: measure(s) for name, s in zip(names, servers)},
                       swap=True)


def round_trips(title, names, servers, blocks):
    """Warms each server up, then reports its round trips side by side."""
    for server in servers:
        server.round_trips(WARM_UP)
    report(title, names,
           side_by_side(names, servers, blocks * BLOCK, BLOCK, lambda s: s.round_trips),
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
        samples = max(args.blocks // 4, 4)
        for in_flight in (8, 32):
            report(f"the same, {in_flight} in flight ({RATE_CALLS} calls a sample)", names,
                   side_by_side(names, mcps, samples, 1, lambda m: m.rates(in_flight)),
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
