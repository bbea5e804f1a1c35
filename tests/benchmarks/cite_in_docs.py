"""Write benchmark figures into the docs, citing the report they came from.

Docs mark a figure as ``<!--bench:NAME-->VALUE<!--/bench-->`` (or, before the first fill,
``{{bench:NAME}}``), where NAME is ``<benchmark>.<figure>`` as in ``reports/bench.json``
(e.g. ``bench_sinks.sink_spans_per_s``). Running this after ``make bench`` replaces every VALUE
with the median of that figure and updates the ``<!--bench-source-->...<!--/bench-source-->``
line with the report's date and machine. Unknown names are an error (exit code 1).

Usage: python tests/benchmarks/cite_in_docs.py [--report reports/bench.json] docs/operations.md ...
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

MARKED = re.compile(r"<!--bench:([\w.\-]+)-->(.*?)<!--/bench-->")
PLACEHOLDER = re.compile(r"\{\{bench:([\w.\-]+)\}\}")
SOURCE = re.compile(r"<!--bench-source-->(.*?)<!--/bench-source-->")


def figures(report: dict) -> dict[str, float]:
    out = {}
    for bench, result in report["benchmarks"].items():
        for name, stats in result.get("figures", {}).items():
            out[f"{bench}.{name}"] = stats["median"]
    return out


def fmt(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", type=Path, default=Path("reports/bench.json"))
    parser.add_argument("docs", nargs="+", type=Path)
    args = parser.parse_args()
    report = json.loads(args.report.read_text())
    known = figures(report)
    machine = report["machine"]
    source = (f"{args.report} of {machine['date']} ({machine['cores']} cores, {machine['cpu']}; medians of "
              f"{report['repeats']} run(s))")  # fmt: skip
    missing: set[str] = set()

    def value(name: str) -> str:
        if name not in known:
            missing.add(name)
            return f"{{{{bench:{name}}}}}"
        return f"<!--bench:{name}-->{fmt(known[name])}<!--/bench-->"

    for doc in args.docs:
        text = doc.read_text()
        text = MARKED.sub(lambda m: value(m.group(1)), text)
        text = PLACEHOLDER.sub(lambda m: value(m.group(1)), text)
        text = SOURCE.sub(f"<!--bench-source-->{source}<!--/bench-source-->", text)
        doc.write_text(text)
    if missing:
        print("figures not in the report: " + ", ".join(sorted(missing)), file=sys.stderr)
        return 1
    print(f"cited {source} in {', '.join(map(str, args.docs))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
