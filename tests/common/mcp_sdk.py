"""What the client tests need of the official `mcp` SDK, on its 1.x line
and its 2.x line alike: 2.x renamed its HTTP package to httpx2, yields two
streams from the streamable HTTP transport (1.x: three), takes the read
timeout in seconds (1.x: a timedelta) and names result fields in snake
case (1.x: camel case)."""

import importlib.metadata
from contextlib import asynccontextmanager
from datetime import timedelta

from mcp.client.streamable_http import streamable_http_client

VERSION = importlib.metadata.version("mcp")
MAJOR = int(VERSION.split(".")[0])

if MAJOR >= 2:
    import httpx2 as httpx
else:
    import httpx


@asynccontextmanager
async def mcp_streams(url, http, **options):
    """The streamable HTTP transport as (read, write)."""
    async with streamable_http_client(url, http_client=http, **options) as streams:
        yield streams[0], streams[1]


def field(model, snake):
    """A result field by its 2.x name, or its 1.x camel-case one."""
    head, *rest = snake.split("_")
    camel = head + "".join(part.title() for part in rest)
    return getattr(model, snake, None) if hasattr(model, snake) else getattr(model, camel, None)


def is_error(result):
    return bool(field(result, "is_error"))


async def call(session, tool, args, timeout=60, progress=None):
    """A tool call (with `progress(done, total, message)` called for each
    progress notification): the result, its text, its structured content."""
    wait = timeout if MAJOR >= 2 else timedelta(seconds=timeout)
    result = await session.call_tool(tool, args, read_timeout_seconds=wait, progress_callback=progress)
    text = "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")
    return result, text, (field(result, "structured_content") or {})
