"""The retrieval MCP server over the shipped corpus: ``python -m rllm_envs.mcp.retrieval.server``.

Tools: ``search(query, k=5)`` ranks documents with BM25 and returns ids, titles and snippets;
``open_document(doc_id)`` returns a document's full text. ``--corpus FILE`` serves another
JSONL corpus (``doc_id``, ``title``, ``text`` per line); ``--http PORT`` serves Streamable
HTTP on loopback instead of stdio.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from rllm_envs.mcp.retrieval.bm25 import BM25Index
from rllm_envs.mcp.servers import serve

SHIPPED_CORPUS = Path(__file__).parent / "data" / "corpus.jsonl"
SNIPPET_CHARS = 160
MAX_RESULTS = 20


@dataclass(frozen=True)
class Corpus:
    documents: tuple[dict, ...]
    index: BM25Index

    @classmethod
    def load(cls, path: Path) -> Corpus:
        with path.open(encoding="utf-8") as handle:
            documents = tuple(json.loads(line) for line in handle if line.strip())
        texts = [f"{document['title']}. {document['text']}" for document in documents]
        return cls(documents, BM25Index.build(texts))

    def search(self, query: str, k: int = 5) -> str:
        k = max(1, min(int(k), MAX_RESULTS))
        hits = self.index.top(query, k)
        if not hits:
            return f"No document matches {query!r}."
        lines = []
        for rank, (position, score) in enumerate(hits, 1):
            document = self.documents[position]
            snippet = document["text"][:SNIPPET_CHARS]
            lines.append(
                f"{rank}. [{document['doc_id']}] {document['title']} (score {score:.2f}): {snippet}"
            )
        return "\n".join(lines)

    def open_document(self, doc_id: str) -> str:
        for document in self.documents:
            if document["doc_id"] == doc_id.strip():
                return f"[{document['doc_id']}] {document['title']}\n{document['text']}"
        raise ValueError(f"no document with id {doc_id!r}; ids look like 'person-03'")


def build_server(corpus: Corpus):
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("rllm-retrieval")

    @server.tool()
    def search(query: str, k: int = 5) -> str:
        """Search the document collection. Returns up to k results (id, title, snippet), best
        first. Open a result with open_document to read all of it."""
        return corpus.search(query, k)

    @server.tool()
    def open_document(doc_id: str) -> str:
        """Return the full text of the document with this id (as shown by search)."""
        return corpus.open_document(doc_id)

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=SHIPPED_CORPUS)
    parser.add_argument("--http", type=int, default=None, help="serve Streamable HTTP on this port")
    arguments = parser.parse_args()
    serve(build_server(Corpus.load(arguments.corpus)), arguments.http)


if __name__ == "__main__":
    main()
