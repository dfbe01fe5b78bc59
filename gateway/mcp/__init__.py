"""MCP servers in the gateway: which chats see which of their tools, pictures they return,
metrics, and the hub that starts and stops them (docs/mcp.md). `threadline doctor`'s
check of each server is in cli/doctor/mcp.py."""
