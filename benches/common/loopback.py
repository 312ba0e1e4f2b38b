"""What the Python benches that drive a listener share: a free loopback
port, waiting for a server to listen on it, and the bare fork+exec
baseline."""

import os
import shutil
import socket
import subprocess
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(port):
    end = time.time() + 30
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def fork_exec_calls(n):
    """Seconds of each of `n` bare fork+execs of `true` (posix_spawn and wait)."""
    true = shutil.which("true")
    times = []
    for _ in range(n):
        t = time.perf_counter()
        pid = os.posix_spawn(true, [true], os.environ)
        os.waitpid(pid, 0)
        times.append(time.perf_counter() - t)
    return times


def interleaved(calls, block, runners, swap=False):
    """Seconds per call of each runner (`name -> f(n)` returning n times),
    `calls` each, run in blocks of `block` taking turns, so that a change
    of machine load hits every runner alike; with `swap`, the runners'
    order is reversed every other block (none always goes first)."""
    samples = {name: [] for name in runners}
    order = list(runners.items())
    done = 0
    while done < calls:
        n = min(block, calls - done)
        turn = order[::-1] if swap and (done // block) % 2 else order
        for name, run in turn:
            samples[name] += run(n)
        done += n
    return samples


def stop(server):
    """Terminates a server started with subprocess.Popen, killing it if it
    lingers."""
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()


def timed(n, call, check):
    """Seconds of each of `n` calls of `call()`; `check(answer)` after each,
    outside the timing, must hold."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        answer = call()
        times.append(time.perf_counter() - t)
        assert check(answer), answer
    return times
