"""The shipped retrieval task: a BM25 MCP server over a fictional encyclopedia, and its questions."""
