"""agent_reach: the Python client of agent-reach.

``Client`` (threads) and ``AsyncClient`` (asyncio) speak to one long-lived
``agent-reach exec --jsonl`` process; ``agent_reach.langchain.tools(client)``
makes a LangChain tool of each registry tool. The ``agent-reach`` command
itself comes with this package (distribution ``agent-reach-runtime``).
"""

from ._binary import BinaryNotFound, find_agent_reach_bin
from ._protocol import PROCESS_EXITED, ClientClosed
from .aio import AsyncClient
from .client import Client
from .results import ErrorInfo, FullOutputPaths, OriginalBytes, Result, SandboxInfo

__all__ = [
    "AsyncClient",
    "BinaryNotFound",
    "Client",
    "ClientClosed",
    "ErrorInfo",
    "FullOutputPaths",
    "OriginalBytes",
    "PROCESS_EXITED",
    "Result",
    "SandboxInfo",
    "find_agent_reach_bin",
]
