# privstream — `make help` lists the targets.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help install system-deps lint format docs test unit integration demo bench kafka-start kafka-stop clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

# PYTHONWARNINGS: setuptools' notice on editable installs is noise for a newcomer.
# The install compiles four small C extensions (a C compiler and Python's headers).
$(STAMP): pyproject.toml service/privstream/ledger/_slots.c service/privstream/worker/_murmur2.c \
		service/privstream/pipeline/_columns.c service/privstream/mechanisms/_thresholds.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	PYTHONWARNINGS=ignore $(BIN)/pip install -q -e '.[dev]'
	touch $@

install: $(STAMP) ## create .venv with privstream and the dev tools

# Debian packages the tests talk to: Prometheus + promtool, docker-compose (to
# validate docker-compose.yml), kcat. Installed only when a command is missing.
SYSTEM_PACKAGES := prometheus docker-compose kcat
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
system-deps: ## Debian packages the tests use (prometheus, promtool, docker-compose, kcat)
	@for tool in prometheus promtool docker-compose kcat; do \
		command -v $$tool >/dev/null || missing="$$missing $$tool"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing $(SYSTEM_PACKAGES) (missing:$$missing)"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends $(SYSTEM_PACKAGES) >/dev/null; \
	fi

lint: $(STAMP) ## ruff, mypy --strict, and the import contracts (layers point inward, no circles)
	$(BIN)/ruff check service tests bench deploy
	$(BIN)/ruff format --check service tests bench deploy
	$(BIN)/mypy service/privstream
	$(BIN)/lint-imports --no-cache

format: $(STAMP) ## apply ruff's formatter and safe fixes
	$(BIN)/ruff format service tests bench deploy
	$(BIN)/ruff check --fix service tests bench deploy

# --strict: a broken link or anchor fails the build (the site builds offline)
docs: $(STAMP) ## build the documentation site into site/ (mkdocs --strict)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

test: lint docs system-deps ## every test, integration with a real Kafka broker included
	$(BIN)/pytest

unit: $(STAMP) ## the fast tests only (no broker)
	$(BIN)/pytest tests/unit tests/project

integration: $(STAMP) system-deps ## the tests against a real Kafka broker and Prometheus
	$(BIN)/pytest tests/integration

demo: $(STAMP) ## start a local broker, stream synthetic telemetry through privstream, stop
	deploy/demo/demo.sh

BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): pyproject.toml $(STAMP)
	PYTHONWARNINGS=ignore $(BIN)/pip install -q -e '.[dev,bench]'
	touch $@

# Each script prints its environment and ratios and exits 1 when a target is missed;
# make goes on (-) so that one miss does not hide the other results, then fails at the
# end. BENCH_ARGS=--quick gives a short smoke run of each.
bench: $(BENCH_STAMP) ## benchmarks (ratios against baselines measured in the same run; minutes)
	@status=0; \
	for script in samplers pipeline file_mode e2e latency memory ledger utility http_flood; do \
		echo "== bench/$$script.py $(BENCH_ARGS)"; \
		$(BIN)/python bench/$$script.py $(BENCH_ARGS) || status=1; \
	done; \
	exit $$status

kafka-start: ## start the local Kafka broker (127.0.0.1:9092; KAFKA_PORT moves it)
	deploy/local-kafka/kafka.sh start

kafka-stop: ## stop the local Kafka broker
	deploy/local-kafka/kafka.sh stop

clean: ## remove the venv, caches and local broker data
	-deploy/local-kafka/kafka.sh stop
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache deploy/local-kafka/run site
