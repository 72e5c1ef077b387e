"""An MCP server built with the official SDK, behind a bearer token, over HTTP.

``python mcp_http_server.py PORT [http|sse]`` with the token in ``MCP_TEST_TOKEN``:
streamable HTTP at ``/mcp`` (the default), or the SDK's SSE transport at ``/sse``. The
SDK's own resource-server auth (a ``TokenVerifier``) refuses any other ``Authorization``.
"""

from __future__ import annotations

import os
import sys

import uvicorn
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

TOKEN = os.environ["MCP_TEST_TOKEN"]


class OneToken:
    """Accepts exactly the test's token."""

    async def verify_token(self, token: str) -> AccessToken | None:
        if token != TOKEN:
            return None
        return AccessToken(token=token, client_id="tests", scopes=[])


def build(port: int, path: str = "/mcp") -> MCPServer:
    url = f"http://127.0.0.1:{port}"
    server = MCPServer(
        "notes",
        token_verifier=OneToken(),
        auth=AuthSettings(issuer_url=url, resource_server_url=f"{url}{path}", required_scopes=[]),
    )

    @server.tool(description="Add two numbers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Say hello.")
    def hello(name: str) -> str:
        return f"hello, {name}"

    return server


if __name__ == "__main__":
    port = int(sys.argv[1])
    sse = sys.argv[2:] == ["sse"]
    server = build(port, "/sse" if sse else "/mcp")
    app = server.sse_app() if sse else server.streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
