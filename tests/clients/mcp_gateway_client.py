"""Drives acp's MCP gateway with the official MCP Python SDK's client (pip package `mcp`), a
second client independent of the gateway's own code: the handshake, the tool list, an allowed,
a denied and a challenged call, a resource, and the session's end.

Usage: python3 mcp_gateway_client.py URL CREDENTIAL [handshake|auto]. Prints one JSON object of
what it saw. `handshake` (the default) opens a session with `initialize`; `auto` is the SDK's
own default client (`mcp.Client`), which probes `server/discover` and speaks the sessionless
revision when the server does.
"""

import asyncio
import json
import sys

from mcp.client import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def text_of(result):
    return "".join(getattr(block, "text", "") for block in result.content)


async def calls(session, seen: dict) -> None:
    tools = await session.list_tools()
    seen["tools"] = sorted(tool.name for tool in tools.tools)
    allowed = await session.call_tool("list_issues", {"repo": "acme/api"})
    seen["allowed"] = {
        "text": text_of(allowed),
        "is_error": bool(allowed.is_error),
        "trace_id": (allowed.meta or {}).get("acp/trace_id"),
    }
    denied = await session.call_tool("delete_repo", {"repo": "acme/api"})
    seen["denied"] = {
        "text": text_of(denied),
        "is_error": bool(denied.is_error),
        "decision": ((denied.meta or {}).get("acp/decision") or {}).get("decision"),
    }
    held = await session.call_tool(
        "transfer", {"amount": 500, "currency": "USD", "to": "acct_9"}
    )
    seen["challenged"] = {
        "text": text_of(held),
        "is_error": bool(held.is_error),
        "status_url": (held.meta or {}).get("acp/approval_status_url"),
    }
    resource = await session.read_resource("repo://acme")
    seen["resource"] = getattr(resource.contents[0], "text", None)


async def main(url: str, credential: str, mode: str) -> dict:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {credential}"})
    seen = {}
    async with http:
        transport = streamable_http_client(url, http_client=http)
        if mode == "auto":
            async with Client(transport) as client:
                seen["protocol_version"] = client.protocol_version
                await calls(client, seen)
            return seen
        async with transport as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                seen["protocol_version"] = init.protocol_version
                await calls(session, seen)
    return seen


if __name__ == "__main__":
    mode = sys.argv[3] if len(sys.argv) > 3 else "handshake"
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2], mode))))
