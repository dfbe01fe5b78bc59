"""Tools from MCP servers: one supervised connection per server, its tools as ours (docs/mcp.md).

`stdio.py` runs a server program in its own process group, `connection.py` keeps one
server connected (and reconnects it), `results.py` reads what a call returned, and
`tools.py` makes a listed tool into a `Tool` the loop can run. Which chats see which
tools is the gateway's business (gateway/mcp/).
"""
