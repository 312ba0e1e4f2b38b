"""The client against a temp registry, through the `agent-reach` the wheel
installed: results, a rejected parameter, a timeout, secrets redacted,
busy under a queue of 1, 1,000 requests in one batch, a restart after the
process died, and no process left after close."""

import asyncio
import os
import signal
import sys
import time

import pytest

import agent_reach
from agent_reach import AsyncClient, Client, Result
from conftest import SECRET, write_registry


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is not alive either.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_the_command_comes_from_the_wheel():
    path = agent_reach.find_agent_reach_bin()
    assert os.path.realpath(path).startswith(os.path.realpath(sys.prefix)), path


def test_a_tool_gives_a_typed_result(registry, project, env):
    with Client(registry, root=project, env=env) as client:
        result = client.run("echo_msg", msg="hello")
    assert isinstance(result, Result)
    assert result.status == "success" and result.ok
    assert result.stdout == "hello\n"
    assert result.exit_code == 0 and result.signal is None
    assert result.tool == "echo_msg"
    assert isinstance(result.duration_ms, int)
    assert result.original_bytes.stdout == 6
    assert result.error is None


def test_a_bad_parameter_is_rejected(registry, project, env):
    with Client(registry, root=project, env=env) as client:
        too_big = client.run("count", n=1000)
        unknown = client.run("no_such_tool")
    assert too_big.status == "rejected", too_big
    assert too_big.error is not None and too_big.error.kind
    assert unknown.status == "rejected"
    assert unknown.error.kind == "unknown_tool"


def test_a_tool_and_a_command_time_out(registry, project, env):
    with Client(registry, root=project, env=env) as client:
        tool = client.run("slow")
        command = client.run_command(["sleep", "30"], timeout_ms=300)
        fine = client.run_command(["echo", "raw"], workdir=project)
    for result in (tool, command):
        assert result.status == "timeout", result
        assert result.exit_code == 124
        assert result.signal is not None
    assert fine.ok and fine.stdout == "raw\n"


def test_secrets_are_redacted(registry, project, env):
    with Client(registry, root=project, env=env) as client:
        result = client.run("show_secret")
    assert result.ok, result
    assert "token=" in result.stdout
    assert SECRET not in result.stdout and SECRET not in result.stderr


def test_busy_under_a_queue_of_1_is_retried_after_retry_after_ms(project, env):
    registry = write_registry(str(project), global_=1, queue=1)
    requests = [{"id": f"nap-{i}", "tool": "nap"} for i in range(6)]
    with Client(registry, root=project, env=env, max_in_flight=6, busy_retries=0) as client:
        raw = client.batch(requests)
    busy = [r for r in raw if r.status == "busy"]
    assert busy, [r.status for r in raw]
    assert all(r.error.kind == "queue_full" and r.error.retry_after_ms for r in busy)
    with Client(registry, root=project, env=env, max_in_flight=6) as client:
        retried = client.batch(requests)
    assert [r.status for r in retried] == ["success"] * 6
    assert [r.id for r in retried] == [r["id"] for r in requests]


def test_a_batch_of_1000_requests_matches_results_by_id(registry, project, env):
    requests = [{"id": f"r{i}", "tool": "echo_msg", "args": {"msg": f"m{i}"}} for i in range(1000)]
    with Client(registry, root=project, env=env, max_in_flight=64) as client:
        results = client.batch(requests)
    assert len(results) == 1000
    for i, result in enumerate(results):
        assert result.id == f"r{i}"
        assert result.ok, result
        assert result.stdout == f"m{i}\n"


def test_the_same_id_twice_is_no_collision(registry, project, env):
    requests = [{"id": "same", "tool": "echo_msg", "args": {"msg": m}} for m in ("a", "b")]
    with Client(registry, root=project, env=env) as client:
        results = client.batch(requests)
    assert [r.stdout for r in results] == ["a\n", "b\n"]
    assert [r.id for r in results] == ["same", "same"]


def test_a_dead_process_is_restarted(registry, project, env):
    with Client(registry, root=project, env=env) as client:
        first = client.pid
        assert client.run("noop").ok
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while alive(first) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not alive(first)
        result = client.run("echo_msg", msg="again")
        assert result.ok, result
        assert client.pid != first and client.restarts == 1


def test_a_request_lost_with_the_process_says_so(registry, project, env):
    with Client(registry, root=project, env=env) as client:
        pid = client.pid
        killer = __import__("threading").Timer(0.3, os.kill, (pid, signal.SIGKILL))
        killer.start()
        result = client.run_command(["sleep", "20"], timeout_ms=0)
        killer.join()
    assert result.status == "error"
    assert result.error.kind == agent_reach.PROCESS_EXITED


def test_close_leaves_no_process(registry, project, env):
    client = Client(registry, root=project, env=env)
    pid = client.pid
    assert alive(pid)
    assert client.run("noop").ok
    client.close()
    assert not alive(pid)
    with Client(registry, root=project, env=env) as inner:
        inner_pid = inner.pid
        assert alive(inner_pid)
    assert not alive(inner_pid)
    assert client.run("noop").status == "error"


def test_the_async_client_does_the_same(registry, project, env):
    async def main():
        async with AsyncClient(registry, root=project, env=env, max_in_flight=32) as client:
            one = await client.run("echo_msg", msg="async")
            timeout = await client.run_command(["sleep", "30"], timeout_ms=300)
            many = await client.batch(
                [{"id": f"a{i}", "tool": "echo_msg", "args": {"msg": str(i)}} for i in range(200)]
            )
            pid = client.pid
        return one, timeout, many, pid

    one, timeout, many, pid = asyncio.run(main())
    assert one.ok and one.stdout == "async\n"
    assert timeout.status == "timeout"
    assert [r.id for r in many] == [f"a{i}" for i in range(200)]
    assert all(r.ok and r.stdout == f"{i}\n" for i, r in enumerate(many))
    assert not alive(pid)
