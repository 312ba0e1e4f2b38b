"""A `Start` stream of `yes | head -c 1G` read through grpcio, the gRPC
stack of the published agent-sandbox client (which reads every message in
Python, so the number of messages counts, not only the bytes).

Starts `serve --listen sandboxd-grpc=127.0.0.1:0` for each binary given
and runs the streams alternately (a change of machine load hits each build
alike); prints each run's MiB/s and message count, then the medians. The
output goes into `cat` in the same run as the baseline of the producer.

Usage: python benches/grpcio_start.py [--runs 5] [--bytes N] BIN [BIN...]
Run by benches/grpcio_start.sh, which makes the venv.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "common"))
from grpc_wire import start_request  # noqa: E402


def serve(binary, workdir):
    """The server and its port, read off its log's listening line."""
    log = open(os.path.join(workdir, f"serve-{os.getpid()}-{time.monotonic_ns()}.log"), "w+")
    proc = subprocess.Popen([binary, "serve", "--listen", "sandboxd-grpc=127.0.0.1:0"],
                            stdout=subprocess.DEVNULL, stderr=log, cwd=workdir,
                            env={"PATH": "/usr/bin:/bin"})
    for _ in range(200):
        log.seek(0)
        found = re.search(r'"addr":"127\.0\.0\.1:(\d+)"', log.read())
        if found:
            return proc, int(found.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"{binary}: no listening line in its log")


def stream(port, size):
    """MiB/s and messages of one Start stream of `size` bytes."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        start = channel.unary_stream("/process.v1.ProcessService/Start",
                                     request_serializer=lambda b: b,
                                     response_deserializer=lambda b: b)
        request = start_request("/bin/sh", "-c", f"yes | head -c {size}")
        began = time.monotonic()
        total = messages = 0
        for message in start(request, timeout=300):
            total += len(message)
            messages += 1
        took = time.monotonic() - began
    if total < size:
        raise SystemExit(f"the stream ended after {total} of {size} bytes")
    return size / took / 2**20, messages


def into_cat(size):
    began = time.monotonic()
    subprocess.run(["/bin/sh", "-c", f"yes | head -c {size} | cat > /dev/null"], check=True)
    return size / (time.monotonic() - began) / 2**20


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--bytes", type=int, default=1 << 30)
    parser.add_argument("binaries", nargs="+")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ar-grpcio-start") as workdir:
        servers = [serve(os.path.abspath(b), workdir) for b in args.binaries]
        rates = {b: [] for b in args.binaries}
        counts = {b: [] for b in args.binaries}
        cats = []
        try:
            for run in range(1, args.runs + 1):
                cats.append(into_cat(args.bytes))
                print(f"run {run}: into cat {cats[-1]:.0f} MiB/s", flush=True)
                for binary, (_, port) in zip(args.binaries, servers):
                    rate, messages = stream(port, args.bytes)
                    rates[binary].append(rate)
                    counts[binary].append(messages)
                    print(f"  {binary}: {rate:.0f} MiB/s in {messages} messages", flush=True)
        finally:
            for proc, _ in servers:
                proc.terminate()
                proc.wait(timeout=30)
        cat = statistics.median(cats)
        print(f"medians of {args.runs} runs; into cat {cat:.0f} MiB/s")
        for binary in args.binaries:
            rate = statistics.median(rates[binary])
            print(f"  {binary}: {rate:.0f} MiB/s ({rate / cat:.0%} of cat), "
                  f"{statistics.median(counts[binary]):.0f} messages")


if __name__ == "__main__":
    main()
