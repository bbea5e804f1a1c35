"""Uploaded datasets: validated line by line, produced to ``agl.datasets``, kept in the ``datasets`` table.

A file is parsed completely before anything is produced, so a bad line (its number in the error)
leaves nothing behind. The upload answers once the sinks have written every line to ClickHouse,
which is the durable copy: the local broker keeps records in memory only, the embedded engine keeps
its tables on disk, so a restarted server lists and trains from the table.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import time
from typing import Any, Optional

from agl_stream.client.clickhouse_reader import ClickHouseReader
from agl_stream.config import Settings
from agl_stream.training_service.types import DatasetInfo
from agl_stream.types import DatasetLine

from agl_stream_trainer.server.errors import ServiceError, bad_request, conflict, not_found

DATA_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_LINES = 1_000_000


def parse_jsonl(text: str, split: str) -> list[tuple[int, str]]:
    """(line number, item JSON) of every non-blank line; a ``ServiceError`` naming the first bad line."""
    items: list[tuple[int, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{split} file, line {number}"
        try:
            item = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise bad_request(f"{where}: not JSON ({exc.msg} at column {exc.colno})", "bad_jsonl") from None
        if not isinstance(item, dict):
            raise bad_request(f"{where}: expected a JSON object, got {type(item).__name__}", "bad_jsonl")
        question = item.get("question")
        if not isinstance(question, str) or not question.strip():
            raise bad_request(f"{where}: 'question' must be a non-empty string", "bad_jsonl")
        items.append((number, json.dumps(item, ensure_ascii=False)))
        if len(items) > MAX_LINES:
            raise bad_request(f"{split} file: more than {MAX_LINES:,} lines", "too_large")
    if not items:
        raise bad_request(f"{split} file: no items (every line was blank)", "bad_jsonl")
    return items


class DatasetStore:
    def __init__(self, settings: Settings, producer: Any, reader: ClickHouseReader, *, visible_timeout: float = 120.0) -> None:
        self.settings = settings
        self.producer = producer  # agl_stream.kafka.RecordProducer, started
        self.reader = reader
        self.visible_timeout = visible_timeout

    async def upload(self, train: Optional[str], train_file: str = "", test: Optional[str] = None, test_file: str = "",
                     data_id: Optional[str] = None) -> DatasetInfo:  # fmt: skip
        if train is None:
            raise bad_request("a train file is required", "bad_jsonl")
        if data_id is not None and not DATA_ID.match(data_id):
            raise bad_request(f"data_id {data_id!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
        data_id = data_id or f"data-{secrets.token_hex(4)}"
        splits = {"train": (parse_jsonl(train, "train"), train_file)}
        if test is not None:
            splits["test"] = (parse_jsonl(test, "test"), test_file)
        if data_id in {d.data_id for d in await self.list(include_partial=True)}:
            raise conflict(f"data_id {data_id!r} exists already; choose another or leave it out", "data_exists")
        now = time.time()
        topic = self.settings.topic("datasets")
        for split, (items, name) in splits.items():
            records = [(data_id, DatasetLine(data_id=data_id, split=split, line=line, lines=len(items), item=item,  # type: ignore[arg-type]
                                             file_name=name, uploaded_at=now)) for line, item in items]  # fmt: skip
            await self.producer.send_many(topic, records)
        return await self._visible(data_id)

    async def _visible(self, data_id: str) -> DatasetInfo:
        """Wait for the sinks to have written every line: then a restart finds the dataset."""
        deadline = time.monotonic() + self.visible_timeout
        while True:
            found = {d.data_id: d for d in await self.list()}
            if data_id in found:
                return found[data_id]
            if time.monotonic() > deadline:
                raise ServiceError(503, "not_stored", f"{data_id}: the ClickHouse sinks did not store it within "
                                                      f"{self.visible_timeout:.0f}s; see the processors' log")  # fmt: skip
            await asyncio.sleep(0.2)

    async def list(self, *, include_partial: bool = False) -> list[DatasetInfo]:
        _, rows = await self.reader.query(
            "SELECT DataId, Split, max(Lines), uniqExact(Line), any(FileName), toUnixTimestamp64Milli(min(UploadedAt)) "
            "FROM datasets GROUP BY DataId, Split ORDER BY DataId"
        )
        by_id: dict[str, dict[str, Any]] = {}
        for data_id, split, lines, have, name, uploaded in rows:
            entry = by_id.setdefault(data_id, {"complete": True, "uploaded_at": uploaded / 1000})
            entry["complete"] &= int(have) == int(lines)
            entry[split] = (int(lines), name)
        out = []
        for data_id, entry in by_id.items():
            if "train" not in entry or not (entry["complete"] or include_partial):
                continue
            test_lines, test_file = entry.get("test", (0, ""))
            out.append(DatasetInfo(data_id=data_id, train_lines=entry["train"][0], train_file=entry["train"][1],
                                   test_lines=test_lines, test_file=test_file, uploaded_at=entry["uploaded_at"]))  # fmt: skip
        return sorted(out, key=lambda d: d.uploaded_at)

    async def get(self, data_id: Optional[str]) -> DatasetInfo:
        """``data_id``'s info; None: the latest upload."""
        known = await self.list()
        if data_id is None:
            if not known:
                raise not_found("no dataset uploaded yet: upload_data first", "unknown_data_id")
            return known[-1]
        for info in known:
            if info.data_id == data_id:
                return info
        raise not_found(f"unknown data_id {data_id!r}; known: {[d.data_id for d in known][-10:]}", "unknown_data_id")

    async def items(self, data_id: str, split: str) -> list[dict[str, Any]]:
        _, rows = await self.reader.query(
            "SELECT Item FROM datasets FINAL WHERE DataId = {d:String} AND Split = {s:String} ORDER BY Line",
            {"d": data_id, "s": split},
        )
        return [json.loads(r[0]) for r in rows]
