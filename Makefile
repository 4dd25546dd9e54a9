# privstream — `make help` lists the targets.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help install system-deps schema-registry lint format docs test unit integration csan package-test \
	helm demo bench kafka-start kafka-stop clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

# PYTHONWARNINGS: setuptools' notice on editable installs is noise for a newcomer.
# The install compiles six small C extensions (a C compiler and Python's headers).
C_SOURCES := service/privstream/ledger/_slots.c service/privstream/worker/_murmur2.c \
	service/privstream/worker/_records.c \
	service/privstream/pipeline/_columns.c service/privstream/mechanisms/_thresholds.c \
	service/privstream/aggregates/_bounds.c service/privstream/_buffer_checks.h
$(STAMP): pyproject.toml $(C_SOURCES)
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

# The integration tests' schema registry: Apicurio Registry's distribution from Maven
# Central, fetched once into deploy/schema-registry/dist (docs/avro.md says why this one).
schema-registry: ## fetch the tests' schema registry (Apicurio, Java 21+) unless cached
	deploy/schema-registry/registry.sh fetch

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

# tests/package runs once, through package-test
test: lint docs system-deps schema-registry csan package-test helm ## every test: lint, docs, C extensions under ASan, the wheel, unit, integration
	$(BIN)/pytest --ignore=tests/package

unit: $(STAMP) helm ## the fast tests only (no broker)
	$(BIN)/pytest tests/unit tests/project

integration: $(STAMP) system-deps schema-registry ## the tests against a real Kafka broker and Prometheus
	$(BIN)/pytest tests/integration

# The C extensions built with AddressSanitizer and UBSan into build/csan (tests/csan/
# build.py; make install's builds are left alone), then their tests against those builds:
# the oracle tests, the hostile callers and a seeded fuzz loop. Python is not built with
# ASan, so its runtime is preloaded (it must come first); leaks are not checked (the
# interpreter keeps objects until exit on purpose); PYTHONMALLOC=malloc gives every object
# its own allocation, so an overrun is seen; --capture=sys leaves the sanitizers' reports
# on stderr. gcc's libasan comes with gcc on Debian (libasan8 through libgcc-12-dev).
CSAN_CC  ?= gcc
CSAN_DIR := build/csan
CSAN_TESTS := tests/unit/worker/test_records_redteam.py tests/unit/pipeline/test_columns_hostile.py tests/unit/test_extension_buffers.py \
	tests/unit/test_extensions_fuzz.py tests/unit/pipeline/test_direct_columns.py \
	tests/unit/pipeline/test_columns_redteam.py tests/unit/pipeline/test_encode.py \
	tests/unit/pipeline/test_only.py tests/unit/pipeline/test_decode_redteam.py \
	tests/unit/pipeline/test_columns_nested.py tests/unit/pipeline/test_nested_paths.py \
	tests/unit/worker/test_partitioner.py tests/unit/worker/test_ledger_columns.py \
	tests/unit/worker/test_output_batch.py \
	tests/unit/ledger/test_slots.py tests/unit/mechanisms/test_thresholds.py \
	tests/unit/mechanisms/test_olh_support.py tests/unit/aggregates/test_bounds.py \
	tests/unit/aggregates/test_columnar_hostile.py tests/unit/aggregates/test_bounds_aliasing.py \
	tests/unit/aggregates/test_decoder_agreement.py
CSAN_ENV := LD_PRELOAD="$$($(CSAN_CC) -print-file-name=libasan.so)" \
	ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 PYTHONMALLOC=malloc \
	PYTHONPATH=tests/csan PRIVSTREAM_CSAN_BUILD=$(CURDIR)/$(CSAN_DIR)
csan: $(STAMP) ## the C extensions under ASan and UBSan: their tests, hostile callers, a fuzz loop
	$(BIN)/python tests/csan/build.py $(CSAN_DIR) $(CSAN_CC)
	$(CSAN_ENV) $(BIN)/python tests/csan/check.py
	$(CSAN_ENV) $(BIN)/pytest -q -p no:cacheprovider --capture=sys $(CSAN_TESTS)

# python -m build's sdist and wheel (the wheel built from the sdist, its build deps from
# the package index), the wheel installed into a fresh venv, and privstream --version,
# explain and sanitize run from there, outside the checkout (tests/package/test_wheel.py)
package-test: $(STAMP) ## build the sdist and wheel, install the wheel in a fresh venv, run it
	$(BIN)/pytest -p no:cacheprovider tests/package

# Helm for tests/project/test_helm_chart.py (helm lint, helm template), built from its Go
# module through the Go proxy (a Go toolchain is needed; a few minutes the first time,
# then cached here and in Go's caches)
HELM_VERSION := v3.22.0
HELM := build/tools/helm-$(HELM_VERSION)/helm
$(HELM):
	GOBIN=$(CURDIR)/$(dir $@) go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
helm: $(HELM) ## build the Helm binary the chart's tests use into build/tools

demo: $(STAMP) ## start a local broker, stream synthetic telemetry through privstream, stop
	deploy/demo/demo.sh

BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): pyproject.toml $(STAMP)
	PYTHONWARNINGS=ignore $(BIN)/pip install -q -e '.[dev,bench]'
	touch $@

# Each script prints its environment and ratios and exits 1 when a target is missed;
# make goes on (-) so that one miss does not hide the other results, then fails at the
# end. BENCH_ARGS=--quick gives a short smoke run of each.
# The Avro scenario of e2e.py needs the tests' schema registry (schema-registry).
bench: $(BENCH_STAMP) schema-registry ## benchmarks (ratios against baselines measured in the same run; minutes)
	@status=0; \
	for script in samplers pipeline file_mode e2e latency memory ledger utility http_flood aggregates \
		olh_estimate; do \
		echo "== bench/$$script.py $(BENCH_ARGS)"; \
		$(BIN)/python bench/$$script.py $(BENCH_ARGS) || status=1; \
	done; \
	echo "== bench/e2e.py --avro $(BENCH_ARGS)"; \
	$(BIN)/python bench/e2e.py --avro $(BENCH_ARGS) || status=1; \
	exit $$status

kafka-start: ## start the local Kafka broker (127.0.0.1:9092; KAFKA_PORT moves it)
	deploy/local-kafka/kafka.sh start

kafka-stop: ## stop the local Kafka broker
	deploy/local-kafka/kafka.sh stop

clean: ## remove the venv, caches and local broker data
	-deploy/local-kafka/kafka.sh stop
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache deploy/local-kafka/run \
		deploy/schema-registry/run site $(CSAN_DIR)
