"""Upstream's public surface on ``agl_stream``: what the porting guide promises is what the package has."""

from __future__ import annotations

import logging
import pickle
import re
from pathlib import Path

import pytest

import agl_stream as agl

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs/porting-from-agent-lightning.md"
# ``sorted(n for n in dir(agentlightning) if not n.startswith("_"))`` of agentlightning 0.3.0 (side venv)
UPSTREAM_NAMES = (Path(__file__).parent / "upstream_names_0_3_0.txt").read_text().split()


def _table(section: str) -> dict[str, str]:
    text = GUIDE.read_text().split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `([^`]+)` \| (available|replaced|implemented|not yet) \|", text, re.M)}


def test_guide_lists_every_upstream_name_once() -> None:
    table = _table("Every upstream name")
    assert len(UPSTREAM_NAMES) == 137
    assert sorted(table) == UPSTREAM_NAMES


@pytest.mark.parametrize("name", [n for n, s in _table("Every upstream name").items() if s == "available"])
def test_available_names_import_from_agl_stream(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from agl_stream import {name}", namespace)
    assert namespace[name] is getattr(agl, name)


@pytest.mark.parametrize("name", [n for n, s in _table("Every upstream name").items() if s == "replaced"])
def test_replaced_names_are_not_pretended(name: str) -> None:
    """A replaced name is not on agl_stream under upstream's meaning: importing it raises an ImportError
    naming the replacement (``client``, ``config`` and ``execution`` are agl-stream modules of other
    content, listed as replaced for that reason)."""
    if name in ("client", "config", "execution"):
        assert getattr(agl, name).__name__ == f"agl_stream.{name}"
    else:
        with pytest.raises(ImportError, match=rf"agentlightning\.{name} is not kept; .*`[^`]+`"):
            exec(f"from agl_stream import {name}", {})
        assert name not in dir(agl)


def test_store_api_table_matches_store_client() -> None:
    table = _table("Store API")
    assert len(table) == 30
    for method, status in table.items():
        assert hasattr(agl.StoreClient, method) == (status == "implemented"), method


# ---------------------------------------------------------------- behaviours behind the names


def test_trainer_resolves_upstream_component_specs() -> None:
    trainer = agl.Trainer(adapter={"agent_match": "write"}, strategy={"type": "shm", "n_runners": 3}, hooks=agl.Hook())
    assert isinstance(trainer.adapter, agl.TracerTraceToTriplet) and trainer.adapter.agent_match == "write"
    assert trainer.n_runners == 3 and len(trainer.hooks) == 1 and trainer.algorithm is None
    assert isinstance(agl.Trainer(adapter=agl.TraceToMessages).adapter, agl.TraceToMessages)
    assert agl.Trainer(adapter="tracer:agent_match=x").adapter.agent_match == "x"  # type: ignore[attr-defined]
    assert agl.Trainer(tracer="otlp").tracer == "otlp"
    assert isinstance(agl.Trainer(tracer={"type": "agl_stream.tracer.compat.AgentOpsTracer"}).tracer, agl.AgentOpsTracer)
    assert isinstance(agl.Trainer(algorithm="agl_stream.algorithm.Baseline").algorithm, agl.Baseline)
    with pytest.warns(DeprecationWarning):
        assert agl.Trainer(n_workers=2).n_runners == 2
    with pytest.raises(ValueError, match="store=.*AGL_KAFKA_BOOTSTRAP"):
        agl.Trainer(store=object())
    with pytest.raises(ValueError, match="llm_proxy=.*ingest proxy"):
        agl.Trainer(llm_proxy=object())
    with pytest.raises(TypeError, match="Hook"):
        agl.Trainer(hooks=[object()])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="FastAlgorithm"):
        agl.Trainer(algorithm=agl.algo(lambda: None)).dev(lambda task: 1.0, [1])


def test_baseline_takes_upstreams_parameters() -> None:
    baseline = agl.Baseline(n_epochs=2, train_split=0.8, polling_interval=1.0, max_queue_length=8, span_verbosity="key_values")
    assert isinstance(baseline, agl.FastAlgorithm) and baseline.n_epochs == 2
    with pytest.raises(ValueError, match="train_split"):
        agl.Baseline(train_split=1.0)


def test_env_var_enum_resolves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_CURRENT_ROLE", "runner")
    monkeypatch.setenv("AGL_EMITTER_DEBUG", "maybe")
    assert agl.resolve_str_env_var(agl.LightningEnvVar.AGL_CURRENT_ROLE) == "runner"
    with pytest.raises(ValueError, match="AGL_EMITTER_DEBUG='maybe'"):
        agl.resolve_bool_env_var(agl.LightningEnvVar.AGL_EMITTER_DEBUG)


def test_dummy_tracer_takes_emitted_spans_outside_a_runner() -> None:
    with pytest.raises(RuntimeError, match="No active tracer"):
        agl.emit_reward(1.0)
    tracer = agl.DummyTracer()
    agl.set_active_tracer(tracer)
    try:
        agl.emit_reward(0.5)
        agl.emit_message("hello")
        agl.emit_object({"k": [1, 2]})
        agl.emit_object(7)
    finally:
        agl.clear_active_tracer()
    reward, message, obj, literal = tracer.spans
    assert agl.get_reward_value(reward) == 0.5 and agl.is_reward_span(reward)
    assert agl.get_message_value(message) == "hello" and agl.get_message_value(reward) is None
    assert agl.get_object_value(obj) == {"k": [1, 2]} and agl.get_object_value(literal) == 7


def test_setup_logging_is_idempotent(tmp_path: Path) -> None:
    log_file = tmp_path / "agl.log"
    agl.setup_logging("DEBUG", color=False, files=str(log_file), apply_to=["my_app"])
    agl.setup_logging("INFO", color=False, files=str(log_file), apply_to=["my_app"])
    logger = logging.getLogger("agl_stream")
    assert logger.level == logging.INFO and len(logger.handlers) == 2  # console + file, not doubled
    logging.getLogger("my_app").info("visible")
    assert "visible" in log_file.read_text()
    for name in ("agl_stream", "my_app", "agl_stream_trainer", "agl_stream_processors", "agl_stream_ingest", "agl_stream_topics"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True


def test_rollout_agents_pickle_by_reference_and_litagents_with_their_state() -> None:
    from tests.agl_stream.agents_for_tests import scoring_agent

    assert pickle.loads(pickle.dumps(scoring_agent)) is scoring_agent
    agent = agl.LitAgent(trained_agents="write")
    agent.set_runner(object())
    agent.set_trainer(object())
    copy = pickle.loads(pickle.dumps(agent))
    assert copy.trained_agents == "write" and copy._runner is None and copy._trainer is None


def test_apo_takes_upstreams_constructor() -> None:
    class FakeAsyncOpenAI:  # only stored; no call is made
        pass

    client = FakeAsyncOpenAI()
    apo = agl.APO[dict](client, val_batch_size=10, gradient_batch_size=4, beam_width=2, branch_factor=2,
                        beam_rounds=2, rollout_batch_timeout=30.0, run_initial_validation=False, _poml_trace=True)  # fmt: skip
    assert apo.async_openai_client is client and apo.rollout_batch_timeout == 30.0
    assert (apo.gradient_model, apo.apply_edit_model) == ("gpt-5-mini", "gpt-4.1-mini")
    assert apo.run_initial_validation is False
