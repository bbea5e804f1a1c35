"""Grades the CLI agent's answer: prints 1.0 when the last integer it printed is the task's answer, else 0.0.

Run by the controller after the agent (``--check``), with ``AGL_TASK_FILE`` (the task) and ``AGL_OUTPUT_FILE``
(what the agent printed). Standard library only: it runs with any Python.
"""

from __future__ import annotations

import json
import os
import re


def main() -> None:
    with open(os.environ["AGL_TASK_FILE"]) as task_file:
        answer = str(json.load(task_file)["input"]["answer"]).strip()
    with open(os.environ["AGL_OUTPUT_FILE"], errors="replace") as output:
        integers = re.findall(r"-?\d+", output.read())
    print(1.0 if integers and integers[-1] == answer else 0.0)


if __name__ == "__main__":
    main()
