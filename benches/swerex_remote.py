"""SWE-ReX remote runtime: agent-reach's `swerex-remote` against the
original (`swerex-remote` of PyPI's swe-rex), in the same run, through the
same published client (`RemoteRuntime`).

1. Latency: N `run_in_session("true")` calls per server, in interleaved
   blocks (so a change of machine load hits both alike); per-call median
   and the ratio.
2. A flood: one command printing MB megabytes; the wall time of the reply
   and its size (ours folds it to the token budget and names the spill
   file). The original's cost grows with the square of the output, so it
   gets a smaller flood (--original-flood-mb) to finish in reasonable time.

Usage: python benches/swerex_remote.py OUR_LINK ORIGINAL_EXE [--calls 200]
       [--flood-mb 50] [--original-flood-mb 1]
Run by benches/swerex_remote.sh, which makes the venv and the link.
"""

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import tempfile
import time

from swerex.runtime.abstract import BashAction, CreateBashSessionRequest
from swerex.runtime.remote import RemoteRuntime

TOKEN = "bench-token"
BLOCK = 25


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(exe, port, home):
    env = {"PATH": os.environ["PATH"], "HOME": home, "AGENT_REACH_HOME": home, "LANG": "C.UTF-8"}
    return subprocess.Popen(
        [exe, "--host", "127.0.0.1", "--port", str(port), "--auth-token", TOKEN],
        env=env, cwd=home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


async def calls(rt, n):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        await rt.run_in_session(BashAction(command="true", timeout=30))
        times.append(time.perf_counter() - t)
    return times


async def flood(rt, mb):
    command = f"yes 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ | head -c {mb * 1_000_000}; echo; echo flood-done"
    t = time.perf_counter()
    obs = await rt.run_in_session(BashAction(command=command, timeout=600))
    return time.perf_counter() - t, len(obs.output), obs.output.rstrip().endswith("flood-done")


async def main(args):
    home = tempfile.mkdtemp(prefix="ar-swerex-bench-")
    servers = {}
    runtimes = {}
    try:
        for name, exe in (("ours", args.ours), ("original", args.original)):
            port = free_port()
            servers[name] = start(exe, port, home)
            rt = RemoteRuntime(host="127.0.0.1", port=port, auth_token=TOKEN)
            await rt.wait_until_alive(timeout=60)
            await rt.create_session(CreateBashSessionRequest(startup_timeout=30))
            await calls(rt, 5)  # warm up
            runtimes[name] = rt
        samples = {"ours": [], "original": []}
        done = 0
        while done < args.calls:
            n = min(BLOCK, args.calls - done)
            for name in ("ours", "original"):
                samples[name] += await calls(runtimes[name], n)
            done += n
        ours = statistics.median(samples["ours"]) * 1000
        original = statistics.median(samples["original"]) * 1000
        print(f"run_in_session('true') x{args.calls}: ours median {ours:.2f} ms, original median {original:.2f} ms, ratio {original / ours:.1f}x")
        took, size, whole = await flood(runtimes["ours"], args.flood_mb)
        print(f"{args.flood_mb} MB output, ours: {took:.2f} s, reply {size} chars, ends with the last line: {whole}")
        if args.original_flood_mb > 0:
            took, size, whole = await flood(runtimes["original"], args.original_flood_mb)
            print(f"{args.original_flood_mb} MB output, original: {took:.2f} s, reply {size} chars, ends with the last line: {whole}")
            took, size, whole = await flood(runtimes["ours"], args.original_flood_mb)
            print(f"{args.original_flood_mb} MB output, ours: {took:.2f} s, reply {size} chars")
    finally:
        for rt in runtimes.values():
            try:
                await rt.close()
            except Exception:  # noqa: BLE001
                pass
        for proc in servers.values():
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("ours")
    parser.add_argument("original")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--flood-mb", type=int, default=50)
    parser.add_argument("--original-flood-mb", type=int, default=1)
    asyncio.run(main(parser.parse_args()))
