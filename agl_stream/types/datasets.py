"""Uploaded datasets as topic records: one :class:`DatasetLine` per JSONL line (topic ``agl.datasets``).

The training server validates a whole file before it produces any line, so a dataset is either all
there or absent; every line carries its split's line count, which is how a reader tells a complete
upload from one cut short (a crash between the first and the last record). The ClickHouse sinks keep
them in the ``datasets`` table, the durable copy a restarted server lists and trains from.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DatasetSplit = Literal["train", "test"]


class DatasetLine(BaseModel):
    model_config = ConfigDict(extra="ignore")
    data_id: str = Field(min_length=1)
    split: DatasetSplit
    line: int = Field(ge=1, description="1-based line number of the item in the uploaded file (blank lines skipped)")
    lines: int = Field(ge=1, description="how many items the split holds")
    item: str = Field(description="the item as a JSON object, exactly as uploaded")
    file_name: str = ""
    uploaded_at: float = Field(default_factory=time.time)
