"""``MCPServerSse`` of the OpenAI Agents SDK, made to work with the MCP SDK this project pins (mcp 2.x).

openai-agents 0.0.7 (the newest release that installs beside agl-stream's pins, docs/frameworks.md note 3)
was written against mcp 1.x: when it turns a server's tools into function tools for the model it reads
``tool.inputSchema``, which mcp 2 renamed ``input_schema`` (``AttributeError`` on the first turn). The
transport, the session and ``call_tool`` work unchanged over mcp 2.3's HTTP+SSE server. This subclass
only hands the SDK each tool under the old field name; everything else is the SDK's class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.mcp import MCPServerSse as _SdkMCPServerSse


@dataclass(frozen=True)
class SdkTool:
    """The fields of an MCP tool that openai-agents 0.0.7 reads, under mcp 1.x's names."""

    name: str
    description: str | None
    inputSchema: dict[str, Any]  # noqa: N815 - the SDK reads this name


class MCPServerSse(_SdkMCPServerSse):
    """The SDK's SSE MCP server; :meth:`list_tools` gives its tools in the shape the SDK reads."""

    async def list_tools(self) -> list[Any]:
        return [SdkTool(tool.name, tool.description, dict(tool.input_schema)) for tool in await super().list_tools()]
