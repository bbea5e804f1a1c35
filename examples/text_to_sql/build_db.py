"""Build the example's SQLite database (``company.db``, committed) from deterministic data."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

HERE = Path(__file__).parent
DB_PATH = HERE / "company.db"

SCHEMA = """
CREATE TABLE departments (id INTEGER PRIMARY KEY, name TEXT NOT NULL, floor INTEGER NOT NULL);
CREATE TABLE employees (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, department_id INTEGER NOT NULL REFERENCES departments(id),
    salary INTEGER NOT NULL, hire_year INTEGER NOT NULL, manager_id INTEGER REFERENCES employees(id)
);
CREATE TABLE projects (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, department_id INTEGER NOT NULL REFERENCES departments(id),
    budget INTEGER NOT NULL
);
CREATE TABLE assignments (
    employee_id INTEGER NOT NULL REFERENCES employees(id), project_id INTEGER NOT NULL REFERENCES projects(id),
    hours INTEGER NOT NULL, PRIMARY KEY (employee_id, project_id)
);
"""

DEPARTMENTS = [(1, "Engineering", 3), (2, "Sales", 1), (3, "Research", 4), (4, "Support", 1), (5, "Finance", 2)]
FIRST = ["Ada", "Ben", "Cleo", "Dan", "Eva", "Finn", "Gia", "Hugo", "Iris", "Jon", "Kai", "Lena", "Milo", "Nora",
         "Omar", "Pia", "Quin", "Rosa", "Sam", "Tara", "Uma", "Vik", "Wren", "Yara", "Zed"]  # fmt: skip
PROJECTS = ["Atlas", "Beacon", "Comet", "Delta", "Ember", "Falcon", "Granite", "Harbor"]


def build(path: Path = DB_PATH) -> Path:
    rng = random.Random(7)
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    con.executescript(SCHEMA)
    con.executemany("INSERT INTO departments VALUES (?, ?, ?)", DEPARTMENTS)
    employees = []
    for i, name in enumerate(FIRST, start=1):
        dept = rng.randint(1, 5)
        manager = None if i <= 5 else rng.randint(1, 5)
        employees.append((i, name, dept, rng.randrange(40_000, 160_000, 1_000), rng.randint(2012, 2025), manager))
    con.executemany("INSERT INTO employees VALUES (?, ?, ?, ?, ?, ?)", employees)
    con.executemany(
        "INSERT INTO projects VALUES (?, ?, ?, ?)",
        [(i, name, rng.randint(1, 5), rng.randrange(50_000, 900_000, 10_000)) for i, name in enumerate(PROJECTS, start=1)],
    )
    pairs = {(rng.randint(1, len(FIRST)), rng.randint(1, len(PROJECTS))) for _ in range(40)}
    con.executemany("INSERT INTO assignments VALUES (?, ?, ?)", [(e, p, rng.randint(2, 40)) for e, p in sorted(pairs)])
    con.commit()
    con.close()
    return path


if __name__ == "__main__":
    print(f"wrote {build()}")
