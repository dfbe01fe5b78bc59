"""MCP servers in the gateway: which chats see which of their tools, pictures they return,
metrics, the doctor's check, and the hub that starts and stops them (docs/mcp.md)."""
