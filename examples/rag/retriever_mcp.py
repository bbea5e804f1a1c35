"""The retrieval tool as an MCP server over stdio: ``retrieve(query, k)``, BM25 over the shipped corpus.

Upstream's rag example served a Wikipedia retriever (FAISS + a dense embedding model) over MCP;
this one keeps the shape - a separate MCP server process the agent talks to through an MCP client
session - with a corpus small enough to ship (``data/corpus.jsonl``: 40 short passages about an
invented island, so the model cannot answer from memory) and a BM25 index (``bm25s``) built in
milliseconds when the server starts: nothing is downloaded.

Run by the agent (one server per rollout, as upstream's calc_x starts its MCP calculator)::

    python examples/rag/retriever_mcp.py [corpus.jsonl]
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parent / "data" / "corpus.jsonl"
MAX_K = 5


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str


def load_corpus(path: Path = CORPUS) -> list[Passage]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [Passage(str(r["id"]), str(r["title"]), str(r["text"])) for r in rows]


def format_passages(passages: list[Passage]) -> str:
    """What the tool returns and the model reads: one ``[i] Title: text`` line per passage, best first."""
    return "\n".join(f"[{i}] {p.title}: {p.text}" for i, p in enumerate(passages, 1))


class Retriever:
    """BM25 (``bm25s``) over title + text, English stop words removed."""

    def __init__(self, passages: list[Passage]) -> None:
        import bm25s
        from bm25s.tokenization import Tokenizer

        self.passages = passages
        self.tokenizer = Tokenizer(stopwords="en")
        ids = self.tokenizer.tokenize([f"{p.title}. {p.text}" for p in passages], return_as="ids", show_progress=False)
        self.index = bm25s.BM25()
        self.index.index(ids, show_progress=False)

    def search(self, query: str, k: int) -> list[Passage]:
        """The ``k`` best passages with a positive score (none when no query word is in the corpus)."""
        return [self.passages[i] for i, _ in self.scored(query, k)]

    def scored(self, query: str, k: int) -> list[tuple[int, float]]:
        """(corpus position, BM25 score) of the ``k`` best passages with a positive score, best first
        (the ported upstream retriever returns both, as upstream's returns FAISS ids and distances)."""
        ids = self.tokenizer.tokenize([query], update_vocab=False, return_as="ids", show_progress=False)
        found, scores = self.index.retrieve(ids, k=min(k, len(self.passages)), show_progress=False)
        return [(int(i), float(s)) for i, s in zip(found[0], scores[0]) if s > 0]


def build_server(corpus: Path = CORPUS) -> Any:
    """The MCP server with the ``retrieve`` tool (``mcp.server.mcpserver.MCPServer``, FastMCP in mcp 1.x)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    retriever = Retriever(load_corpus(corpus))
    server = MCPServer("brannock-retriever", log_level="WARNING")

    @server.tool(structured_output=False)
    def retrieve(query: str, k: int = 2) -> str:
        """The k passages of the Brannock corpus that best match the query, best first."""
        if not query.strip():
            raise ToolError("the query is empty")
        if not 1 <= k <= MAX_K:
            raise ToolError(f"k must be between 1 and {MAX_K}, not {k}")
        passages = retriever.search(query, k)
        if not passages:  # an error the model can read and learn from, not an empty success
            raise ToolError(f"no word of the query {query!r} is in the corpus")
        return format_passages(passages)

    return server


if __name__ == "__main__":
    build_server(Path(sys.argv[1]) if len(sys.argv) > 1 else CORPUS).run("stdio")
