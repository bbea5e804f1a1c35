"""Run a Grafana panel's SQL on ClickHouse directly: expand the macros the panels use.

The provisioned dashboard's panels hold the saved queries as Grafana renders them: time series
wrapped in ``$__timeFilter(column)`` (the ``grafana-clickhouse-datasource`` macro) and dashboard
variables as ``${name:sqlstring}``. ``agl-stream dashboard`` and the tests run that very SQL:
:func:`expand` turns the time filter into the comparison the plugin generates and each variable
into a server-side query parameter (``{name:String}``), so a value is never spliced into SQL.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

_TIME_FILTER = re.compile(r"\$__timeFilter\((\w+)\)")
_VARIABLE = re.compile(r"\$\{(\w+):sqlstring\}")
_PARAMETER = re.compile(r"\{(\w+):String\}")


class MacroError(ValueError):
    """The SQL uses a macro this expander does not know, or a variable has no value."""


def grafana_variables(sql: str) -> str:
    """Saved-query parameters (``{name:String}``) as Grafana dashboard variables (``${name:sqlstring}``)."""
    return _PARAMETER.sub(lambda m: "${" + m.group(1) + ":sqlstring}", sql)


def expand(sql: str, start: float, end: float, variables: Mapping[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    """The panel SQL with ``$__timeFilter`` over ``[start, end]`` (epoch seconds) and its variables as parameters."""
    variables = variables or {}
    params: dict[str, Any] = {}

    def time_filter(match: re.Match[str]) -> str:
        column = match.group(1)
        return f"{column} >= toDateTime({int(start)}) AND {column} <= toDateTime({int(end)})"

    def variable(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in variables:
            raise MacroError(f"the panel needs the variable {name!r}")
        params[name] = str(variables[name])
        return "{" + name + ":String}"

    out = _VARIABLE.sub(variable, _TIME_FILTER.sub(time_filter, sql))
    leftover = re.search(r"\$__\w+|\$\{[^}]*\}", out)
    if leftover:
        raise MacroError(f"unknown macro {leftover.group(0)!r}")
    return out, params


def variables_of(sql: str) -> list[str]:
    """The dashboard variables a panel's SQL needs, in order of appearance."""
    return list(dict.fromkeys(m.group(1) for m in _VARIABLE.finditer(sql)))
