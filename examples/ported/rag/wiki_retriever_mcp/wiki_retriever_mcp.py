"""The retriever MCP server of Agent Lightning's rag example (``wiki_retriever_mcp.py``), ported to agl-stream.

Upstream serves one tool, ``retrieve(query)``, over MCP's HTTP+SSE transport on ``127.0.0.1:8099``: it
embeds the query with a sentence-transformer, searches a FAISS index over a Wikipedia dump and returns
the best chunks as a list of ``{"chunk", "chunk_id", "distance"}``. This server keeps the tool's name,
its one argument, the transport, the address and the shape of the result; what it searches is the
corpus shipped with ``examples/rag`` (40 passages about an invented island, ``examples/rag/data``) with
the BM25 index of ``examples/rag/retriever_mcp.py`` (``bm25s``; built in milliseconds when the server
starts, nothing is downloaded). So each result carries BM25's ``score`` (higher is better) where
upstream's carried FAISS's ``distance``. Unlike a dense index, BM25 finds nothing for a query without a
word of the corpus: that (and an empty query) is a tool error the model reads, rather than an empty list.

Run it yourself as upstream's README does, or let ``train_rag.py`` start it (a child process)::

    python examples/ported/rag/wiki_retriever_mcp/wiki_retriever_mcp.py [--port 8099]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[4]
if str(ROOT) not in sys.path:  # run as a script from anywhere: the index code is examples/rag's
    sys.path.insert(0, str(ROOT))

from examples.rag.retriever_mcp import CORPUS, Retriever, load_corpus  # noqa: E402

TOP_K = 4  # upstream's number of chunks per search
SERVER_NAME = "wiki retrieval mcp"


def chunk_text(title: str, text: str) -> str:
    """A passage as one chunk: its title, then its text (upstream's chunks are Wikipedia passages)."""
    return f"{title}: {text}"


def build_mcp(corpus: Path = CORPUS, top_k: int = TOP_K) -> Any:
    """The MCP server with the ``retrieve`` tool (``mcp.server.mcpserver.MCPServer``: FastMCP before mcp 2)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    passages = load_corpus(corpus)
    retriever = Retriever(passages)
    mcp = MCPServer(name=SERVER_NAME, log_level="WARNING")

    @mcp.tool(name="retrieve", description="Search the encyclopedia for the passages that best match a query.")
    def retrieve(query: str) -> list[dict[str, Any]]:
        """The ``top_k`` best chunks with a positive BM25 score, best first: text, position in the corpus, score."""
        if not query.strip():
            raise ToolError("the query is empty")
        hits = retriever.scored(query, top_k)
        if not hits:
            raise ToolError(f"no passage matches the query {query!r}")
        return [{"chunk": chunk_text(passages[i].title, passages[i].text), "chunk_id": i, "score": round(score, 4)}
                for i, score in hits]  # fmt: skip

    return mcp


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The rag example's retriever as an MCP server over HTTP+SSE.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8099, help="upstream's port; the SSE endpoint is /sse")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    args = parser.parse_args(argv)
    mcp = build_mcp(args.corpus)
    print(f"{SERVER_NAME}: {args.corpus.name}, SSE on http://{args.host}:{args.port}/sse", flush=True)
    mcp.run(transport="sse", host=args.host, port=args.port)


if __name__ == "__main__":
    main()
