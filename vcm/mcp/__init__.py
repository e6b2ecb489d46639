"""vcm over the Model Context Protocol (``vcm mcp``): the memory tools and an agent's memory as
MCP tools and resources, over stdio and streamable HTTP, one agent per session.

* :mod:`vcm.mcp.catalog`: pure mapping between vcm's tool schemas and results and MCP's tools,
  results and resource URIs.
* :mod:`vcm.mcp.server`: the MCP server (official ``mcp`` SDK, low-level ``Server``) whose tool
  calls go through the same :class:`~vcm.tools.executor.ToolExecutor` as the HTTP API's tool route,
  the stdio transport, and who a session serves (the agent's bearer token).
* :mod:`vcm.mcp.http`: the streamable HTTP app, behind a bearer-token gate.
"""
