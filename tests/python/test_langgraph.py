"""LangChain tools from the registry, run by a LangGraph ToolNode given an
AIMessage that carries tool calls (no model)."""

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from agent_reach import Client
from agent_reach.langchain import tools


def test_one_structured_tool_per_registry_tool(registry, project, env):
    with Client(registry, root=project, env=env) as client:
        made = {tool.name: tool for tool in tools(client)}
    assert {"echo_msg", "count", "slow", "nap", "noop", "show_secret"} <= set(made)
    assert "msg" in made["echo_msg"].args
    # The model is told the tool's description, then its timeout and
    # network need (as MCP's tools/list says them).
    assert made["echo_msg"].description == "Print a message\n\nTimeout: 600 s; no network."


def test_a_tool_node_runs_registry_tools_from_tool_calls(registry, project, env):
    with Client(registry, root=project, env=env) as client:
        # The node as an agent graph has it: START -> tools -> END.
        graph = StateGraph(MessagesState)
        graph.add_node("tools", ToolNode(tools(client)))
        graph.add_edge(START, "tools")
        graph.add_edge("tools", END)
        app = graph.compile()
        message = AIMessage(
            content="",
            tool_calls=[
                {"name": "echo_msg", "args": {"msg": "from-the-graph"}, "id": "call-1", "type": "tool_call"},
                {"name": "count", "args": {"n": 3}, "id": "call-2", "type": "tool_call"},
                {"name": "count", "args": {"n": 1000}, "id": "call-3", "type": "tool_call"},
            ],
        )
        out = app.invoke({"messages": [message]})
    replies = {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}
    assert set(replies) == {"call-1", "call-2", "call-3"}
    assert all(isinstance(m, ToolMessage) for m in replies.values())
    assert replies["call-1"].content == "from-the-graph\n"
    assert replies["call-1"].artifact.ok
    assert replies["call-2"].content == "1\n2\n3\n"
    assert "status: rejected" in replies["call-3"].content
