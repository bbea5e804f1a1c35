"""The question set: natural-language questions with gold SQL (split into train / val JSONL)."""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent

QUESTIONS: list[tuple[str, str]] = [
    ("How many employees are there?", "SELECT COUNT(*) FROM employees"),
    ("List the names of all departments.", "SELECT name FROM departments"),
    ("What is the highest salary?", "SELECT MAX(salary) FROM employees"),
    ("What is the average salary of all employees?", "SELECT AVG(salary) FROM employees"),
    ("Which employees were hired after 2020? Give their names.", "SELECT name FROM employees WHERE hire_year > 2020"),
    ("How many projects are there?", "SELECT COUNT(*) FROM projects"),
    ("What is the total budget of all projects?", "SELECT SUM(budget) FROM projects"),
    ("Which departments are on floor 1?", "SELECT name FROM departments WHERE floor = 1"),
    ("How many employees work in Engineering?",
     "SELECT COUNT(*) FROM employees e JOIN departments d ON e.department_id = d.id WHERE d.name = 'Engineering'"),
    ("List the names of employees in the Sales department.",
     "SELECT e.name FROM employees e JOIN departments d ON e.department_id = d.id WHERE d.name = 'Sales'"),
    ("What is the name of the project with the largest budget?", "SELECT name FROM projects ORDER BY budget DESC LIMIT 1"),
    ("How many employees does each department have? Give department name and count.",
     "SELECT d.name, COUNT(e.id) FROM departments d LEFT JOIN employees e ON e.department_id = d.id GROUP BY d.name"),
    ("Which employees earn more than 100000? Give their names.", "SELECT name FROM employees WHERE salary > 100000"),
    ("What is the earliest hire year?", "SELECT MIN(hire_year) FROM employees"),
    ("How many employees have no manager?", "SELECT COUNT(*) FROM employees WHERE manager_id IS NULL"),
    ("What is the average project budget per department? Give department name and average.",
     "SELECT d.name, AVG(p.budget) FROM projects p JOIN departments d ON p.department_id = d.id GROUP BY d.name"),
    ("How many hours in total are assigned to the project Atlas?",
     "SELECT SUM(a.hours) FROM assignments a JOIN projects p ON a.project_id = p.id WHERE p.name = 'Atlas'"),
    ("Which employees are assigned to the project Comet? Give their names.",
     "SELECT e.name FROM employees e JOIN assignments a ON a.employee_id = e.id JOIN projects p ON a.project_id = p.id "
     "WHERE p.name = 'Comet'"),
    ("How many projects does the Research department run?",
     "SELECT COUNT(*) FROM projects p JOIN departments d ON p.department_id = d.id WHERE d.name = 'Research'"),
    ("What is the name of the lowest paid employee?", "SELECT name FROM employees ORDER BY salary ASC LIMIT 1"),
    ("How many employees were hired in 2019?", "SELECT COUNT(*) FROM employees WHERE hire_year = 2019"),
    ("What is the total salary cost of the Finance department?",
     "SELECT SUM(e.salary) FROM employees e JOIN departments d ON e.department_id = d.id WHERE d.name = 'Finance'"),
    ("List the names of projects with a budget above 500000.", "SELECT name FROM projects WHERE budget > 500000"),
    ("Which department has the most employees? Give its name.",
     "SELECT d.name FROM departments d JOIN employees e ON e.department_id = d.id GROUP BY d.id ORDER BY COUNT(*) DESC LIMIT 1"),
    ("How many distinct employees are assigned to at least one project?",
     "SELECT COUNT(DISTINCT employee_id) FROM assignments"),
    ("What is the maximum number of hours any employee works on a single project?", "SELECT MAX(hours) FROM assignments"),
    ("List employee names with their department names.",
     "SELECT e.name, d.name FROM employees e JOIN departments d ON e.department_id = d.id"),
    ("How many departments are there?", "SELECT COUNT(*) FROM departments"),
    ("Which employees are managed by employee 1? Give their names.", "SELECT name FROM employees WHERE manager_id = 1"),
    ("What is the average number of hours per assignment?", "SELECT AVG(hours) FROM assignments"),
]  # fmt: skip


if __name__ == "__main__":
    rows = [{"id": f"sql-{i}", "question": q, "gold_sql": sql} for i, (q, sql) in enumerate(QUESTIONS)]
    (HERE / "data").mkdir(exist_ok=True)
    for name, part in (("train", rows[::2]), ("val", rows[1::2])):
        path = HERE / "data" / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in part))
        print(f"wrote {path} ({len(part)} rows)")
