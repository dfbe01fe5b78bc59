"""`threadline doctor`: checks.py runs every check and prints its line; result.py is the
verdict a check returns; storage.py looks at the database, mcp.py at each MCP server."""
