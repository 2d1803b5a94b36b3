"""MCP servers the MCP env tests run as real processes."""
