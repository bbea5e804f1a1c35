"""Generate the arithmetic datasets (deterministic; the JSONL files are committed).

Two-operand additions and subtractions with small numbers: SmolLM2-135M answers some of them but
rarely in the requested bare-number format, so a verifiable reward (format + correctness) has room
to improve within minutes of CPU training.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).parent


def make(n: int, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.randint(1, 30), rng.randint(1, 30)
        op = rng.choice("+-")
        if op == "-" and b > a:
            a, b = b, a
        answer = a + b if op == "+" else a - b
        rows.append({"id": f"arith-{seed}-{i}", "question": f"What is {a} {op} {b}?", "answer": str(answer)})
    return rows


if __name__ == "__main__":
    for name, n, seed in (("train", 512, 1), ("val", 64, 2), ("test", 64, 3)):
        path = HERE / "data" / f"{name}.jsonl"
        path.parent.mkdir(exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in make(n, seed)))
        print(f"wrote {path} ({n} rows)")
