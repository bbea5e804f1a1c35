"""Write ``data/``: the company database in Spider's layout and question files (JSON lines).

Spider keeps one SQLite file per database under ``database/<db_id>/<db_id>.sqlite`` (training) and
``test_database/`` (evaluation); rows carry ``db_id``, ``question`` and the gold ``query``. The
database and questions come from ``examples/text_to_sql``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parents[1] / "text_to_sql"


def rows(name: str) -> list[dict[str, str]]:
    lines = (SOURCE / "data" / f"{name}.jsonl").read_text().splitlines()
    return [{"db_id": "company", "question": r["question"], "query": r["gold_sql"]} for r in map(json.loads, lines) if r]


def main() -> None:
    data = HERE / "data"
    for folder in ("database", "test_database"):
        target = data / folder / "company"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SOURCE / "company.db", target / "company.sqlite")
    train, val = rows("train"), rows("val")
    files = {"train_spider": train, "test_dev_500": val, "test_dev": val, "train_tiny": train[:2], "test_tiny": val[:2]}
    for name, items in files.items():
        (data / f"{name}.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items))
    print(f"wrote {', '.join(f'{k} ({len(v)})' for k, v in files.items())} to {data}")


if __name__ == "__main__":
    main()
