"""LangChain tools from the registry: ``tools(client)`` gives one
``StructuredTool`` per registry tool, with the parameters' JSON schema
from ``agent-reach tools schema``, so a LangGraph ``ToolNode`` (or any
agent) runs them through the client.

A tool answers with the command's stdout when it succeeded, and otherwise
with a short text saying the status, the exit code, the error and the
output, so a model can see why; the whole :class:`Result` is the tool's
artifact (``response_format="content_and_artifact"``).

Needs ``langchain-core`` (``pip install agent-reach-runtime[langchain]``).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any, Dict, List, Tuple, Union

from . import _protocol as proto
from .aio import AsyncClient
from .client import Client
from .results import Result

try:
    from langchain_core.tools import StructuredTool
except ImportError as missing:  # pragma: no cover - depends on the environment
    raise ImportError(
        "agent_reach.langchain needs langchain-core: pip install 'agent-reach-runtime[langchain]'"
    ) from missing


def schemas(client: Union[Client, AsyncClient]) -> List[Dict[str, Any]]:
    """The function schemas of the client's registry (``tools schema``)."""
    argv = [client.binary, "tools", "schema"]
    argv += proto.registry_flags(client.config, client.profile, client.root)
    done = subprocess.run(argv, capture_output=True, env=client._env, cwd=client._cwd, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode(errors='replace').strip()}"
        )
    return json.loads(done.stdout)


def content(result: Result) -> str:
    """What the model reads of a result."""
    if result.ok:
        return result.stdout
    lines = [f"status: {result.status}"]
    if result.exit_code is not None:
        lines.append(f"exit code: {result.exit_code}")
    if result.error is not None:
        lines.append(f"error: {result.error.kind}: {result.error.message}")
    if result.stdout:
        lines.append(f"stdout:\n{result.stdout}")
    if result.stderr:
        lines.append(f"stderr:\n{result.stderr}")
    return "\n".join(lines)


def tools(client: Union[Client, AsyncClient]) -> List[StructuredTool]:
    """One ``StructuredTool`` per tool of the client's registry."""
    made = []
    for schema in schemas(client):
        function = schema.get("function", schema)
        made.append(_tool(client, function))
    return made


def _tool(client: Union[Client, AsyncClient], function: Dict[str, Any]) -> StructuredTool:
    name = function["name"]
    parameters = function.get("parameters") or {"type": "object", "properties": {}}

    if isinstance(client, AsyncClient):

        async def arun(**params: Any) -> Tuple[str, Result]:
            result = await client.call(name, _present(params))
            return content(result), result

        return StructuredTool.from_function(
            coroutine=arun,
            name=name,
            description=function.get("description") or name,
            args_schema=parameters,
            response_format="content_and_artifact",
        )

    def run(**params: Any) -> Tuple[str, Result]:
        result = client.call(name, _present(params))
        return content(result), result

    return StructuredTool.from_function(
        func=run,
        name=name,
        description=function.get("description") or name,
        args_schema=parameters,
        response_format="content_and_artifact",
    )


def _present(params: Dict[str, Any]) -> Dict[str, Any]:
    # LangChain fills unset optional parameters with None; the registry
    # applies its own defaults to parameters that are absent.
    return {k: v for k, v in params.items() if v is not None}
