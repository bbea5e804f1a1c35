"""Write ``data/train.jsonl`` and ``data/test.jsonl``: short multi-step arithmetic word problems.

Upstream trains on the Calc-X parquet files (8,192 training and 500 test problems from ape210k, GSM8K
and AQuA-RAT, downloaded from a shared drive); nothing is downloaded here, so this script writes a
small stand-in with the same columns: ``id``, ``question``, ``chain`` (the calculator steps in
Calc-X's ``<gadget>`` / ``<output>`` / ``<result>`` markup; not used in training), ``result`` (the
ground truth the reward compares with) and ``source``. Every problem takes two or three operations
and has a whole-number answer, so an answer is right only when it equals the result exactly. The
two splits share no question. Seeded: ``python make_data.py`` rewrites the same files.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Callable, Optional

HERE = Path(__file__).resolve().parent
NAMES = ["Mara", "Tomas", "Ines", "Kofi", "Lena", "Ravi", "Sofia", "Jun", "Amara", "Pavel", "Noor", "Eliot"]
ITEMS = ["pencils", "stickers", "marbles", "apples", "cards", "buttons", "shells", "stamps"]
#: a generator returns (question, [(expression, value), ...] in calculation order), the last value the answer
Problem = tuple[str, list[tuple[str, int]]]


def packs_left(rng: random.Random) -> Problem:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    packs, per, given = rng.randint(3, 12), rng.randint(4, 15), rng.randint(5, 30)
    total = packs * per
    given = min(given, total - 1)
    return (f"{name} buys {packs} packs of {item} with {per} {item} in each pack and gives {given} of them to a "
            f"friend. How many {item} does {name} have left?",
            [(f"{packs} * {per}", total), (f"{total} - {given}", total - given)])  # fmt: skip


def change_from_bill(rng: random.Random) -> Problem:
    name, item = rng.choice(NAMES), rng.choice(["notebooks", "pens", "mugs", "tickets", "sandwiches"])
    count, price = rng.randint(2, 9), rng.randint(2, 12)
    cost = count * price
    bill = next(b for b in (20, 50, 100, 200) if b > cost)
    return (f"A shop sells {item} for {price} dollars each. {name} buys {count} {item} and pays with a {bill}-dollar "
            f"bill. How many dollars of change does {name} get?",
            [(f"{count} * {price}", cost), (f"{bill} - {cost}", bill - cost)])  # fmt: skip


def reading_plan(rng: random.Random) -> Problem:
    name = rng.choice(NAMES)
    a, d, b, e = rng.randint(8, 30), rng.randint(2, 7), rng.randint(8, 30), rng.randint(2, 7)
    return (f"{name} reads {a} pages a day for {d} days, then {b} pages a day for {e} more days. How many pages "
            f"does {name} read in all?",
            [(f"{a} * {d}", a * d), (f"{b} * {e}", b * e), (f"{a * d} + {b * e}", a * d + b * e)])  # fmt: skip


def shared_boxes(rng: random.Random) -> Problem:
    item = rng.choice(ITEMS)
    boxes, each, more = rng.randint(3, 9), rng.randint(4, 20), rng.randint(2, 12)
    total = boxes * each
    return (f"{total} {item} are shared equally among {boxes} boxes. Then {more} more {item} are put in each box. "
            f"How many {item} are in each box now?",
            [(f"{total} / {boxes}", each), (f"{each} + {more}", each + more)])  # fmt: skip


def train_trip(rng: random.Random) -> Problem:
    speed, hours, extra = rng.choice([40, 45, 50, 60, 72, 80, 90, 120]), rng.randint(2, 6), rng.randint(10, 95)
    return (f"A train travels at {speed} km per hour for {hours} hours, then {extra} km more to reach the last "
            f"station. How many km does it travel in total?",
            [(f"{speed} * {hours}", speed * hours), (f"{speed * hours} + {extra}", speed * hours + extra)])  # fmt: skip


def split_rest(rng: random.Random) -> Problem:
    name = rng.choice(NAMES)
    friends, share = rng.randint(2, 6), rng.randint(5, 40)
    spent_a, spent_b = rng.randint(5, 60), rng.randint(5, 60)
    rest = friends * share
    start = rest + spent_a + spent_b
    return (f"{name} has {start} dollars, spends {spent_a} dollars on lunch and {spent_b} dollars on a book, then "
            f"shares the rest equally among {friends} friends. How many dollars does each friend get?",
            [(f"{start} - {spent_a}", start - spent_a), (f"{start - spent_a} - {spent_b}", rest),
             (f"{rest} / {friends}", share)])  # fmt: skip


def garden_seed(rng: random.Random) -> Problem:
    length, width, grams = rng.randint(3, 25), rng.randint(2, 15), rng.randint(2, 9)
    area = length * width
    return (f"A garden is {length} m long and {width} m wide. Each square metre needs {grams} grams of seed. How "
            f"many grams of seed does the whole garden need?",
            [(f"{length} * {width}", area), (f"{area} * {grams}", area * grams)])  # fmt: skip


def last_test(rng: random.Random) -> Problem:
    name = rng.choice(NAMES)
    n = rng.randint(2, 4)
    first_avg = rng.randint(60, 92)
    last = rng.randint(55, 100)
    total = first_avg * n + last
    if total % (n + 1):  # keep the stated average whole: move the last score to the nearest fitting one
        last -= total % (n + 1)
        total = first_avg * n + last
    avg = total // (n + 1)
    return (f"The average of {name}'s first {n} test scores is {first_avg}. After one more test the average of all "
            f"{n + 1} scores is {avg}. What was the score of the last test?",
            [(f"{avg} * {n + 1}", total), (f"{first_avg} * {n}", first_avg * n),
             (f"{total} - {first_avg * n}", last)])  # fmt: skip


GENERATORS: list[Callable[[random.Random], Problem]] = [
    packs_left, change_from_bill, reading_plan, shared_boxes, train_trip, split_rest, garden_seed, last_test,
]


def chain_of(steps: list[tuple[str, int]]) -> str:
    """The steps in Calc-X's markup: each calculator call and its output, then the result."""
    calls = "".join(f'<gadget id="calculator">{expr}</gadget>\n<output>{value}</output>\n\n' for expr, value in steps)
    return f"{calls}<result>{steps[-1][1]}</result>"


def make(n: int, rng: random.Random, seen: set[str], prefix: str) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    while len(rows) < n:
        question, steps = rng.choice(GENERATORS)(rng)
        if question in seen:
            continue
        seen.add(question)
        rows.append({"id": f"{prefix}__{len(rows):05d}", "question": question, "chain": chain_of(steps),
                     "result": str(steps[-1][1]), "source": "agl_synthetic"})  # fmt: skip
    return rows


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=int, default=200, help="training problems")
    parser.add_argument("--test", type=int, default=64, help="test problems")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=HERE / "data")
    args = parser.parse_args(argv)
    rng, seen = random.Random(args.seed), set()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, n in (("train", args.train), ("test", args.test)):
        rows = make(n, rng, seen, name)
        (args.out / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        print(f"wrote {len(rows)} problems to {args.out / f'{name}.jsonl'}")


if __name__ == "__main__":
    main()
