"""Settings from AGL_* variables: types, upstream's boolean rules, and clear errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agl_stream.config import Settings, SettingsError
from agl_stream.service import agl_command
from agl_stream.env_var import resolve_bool_env_var, resolve_int_env_var


def test_defaults_and_env_overrides() -> None:
    s = Settings.from_env(env={"AGL_KAFKA_BOOTSTRAP": "k1:9092, k2:9093", "AGL_PARTITIONS": "8", "AGL_DATA_DIR": "/tmp/x"})
    assert s.kafka_bootstrap == "k1:9092,k2:9093" and s.partitions == 8 and s.data_dir == Path("/tmp/x")
    assert s.effective_clickhouse_dsn == "chdb:///tmp/x/clickhouse"
    assert s.topic("spans") == "agl.spans"
    assert Settings.from_env(env={}).kafka_bootstrap is None


def test_flags_win_over_env() -> None:
    s = Settings.from_env(env={"AGL_PARTITIONS": "8"}, partitions=2, kafka_bootstrap=None)
    assert s.partitions == 2


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"AGL_PARTITIONS": "many"}, "AGL_PARTITIONS"),
        ({"AGL_PARTITIONS": "0"}, "AGL_PARTITIONS"),
        ({"AGL_KAFKA_BOOTSTRAP": "nohostport"}, "AGL_KAFKA_BOOTSTRAP"),
        ({"AGL_CLICKHOUSE_DSN": "mysql://x"}, "AGL_CLICKHOUSE_DSN"),
        ({"AGL_CURRENT_ROLE": "boss"}, "AGL_CURRENT_ROLE"),
        ({"AGL_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "kafka_sasl_mechanism"),
        ({"AGL_NOT_A_SETTING_IS_IGNORED": "1", "AGL_TOPIC_PREFIX": "has space"}, "AGL_TOPIC_PREFIX"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], needle: str) -> None:
    with pytest.raises(SettingsError, match=needle):
        Settings.from_env(env=env)


def test_sasl_settings_flow_to_kafka_options() -> None:
    from agl_stream.kafka import connection_options

    s = Settings.from_env(
        env={
            "AGL_KAFKA_BOOTSTRAP": "k:9092",
            "AGL_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "AGL_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "AGL_KAFKA_SASL_USERNAME": "u",
            "AGL_KAFKA_SASL_PASSWORD": "s3cr3t-pw",
        }
    )
    opts = connection_options(s)
    assert opts["sasl_mechanism"] == "SCRAM-SHA-512" and opts["sasl_plain_username"] == "u"
    assert "s3cr3t-pw" not in repr(s)  # secrets stay out of logs


@pytest.mark.parametrize("raw", ["1", "true", " YES ", "On"])
def test_truthy(raw: str) -> None:
    assert resolve_bool_env_var("X", env={"X": raw}) is True


@pytest.mark.parametrize("raw", ["0", "false", "No", "OFF "])
def test_falsy(raw: str) -> None:
    assert resolve_bool_env_var("X", env={"X": raw}) is False


def test_bool_and_int_errors_and_fallbacks() -> None:
    with pytest.raises(ValueError, match="X='maybe'"):
        resolve_bool_env_var("X", env={"X": "maybe"})
    assert resolve_bool_env_var("X", env={}, fallback=True) is True
    assert resolve_bool_env_var("X", override=False, env={"X": "1"}) is False
    with pytest.raises(ValueError, match="not an integer"):
        resolve_int_env_var("N", env={"N": "1.5"})


def test_runner_python_must_be_an_executable_and_reaches_the_runner_argv(tmp_path: Path) -> None:
    assert Settings.from_env(env={}).runner_python is None
    chosen = Settings.from_env(env={"AGL_RUNNER_PYTHON": sys.executable}).runner_python
    assert chosen == Path(sys.executable)
    assert agl_command("runner", "--agent", "m:a", python=chosen)[:3] == [sys.executable, "-m", "agl_stream.cli.main"]
    not_executable = tmp_path / "python"
    not_executable.write_text("")
    for bad in (str(tmp_path / "missing"), str(not_executable)):
        with pytest.raises(SettingsError, match="AGL_RUNNER_PYTHON"):
            Settings.from_env(env={"AGL_RUNNER_PYTHON": bad})
