# `make demo` and `make test` set everything up on a fresh machine (Debian, Python 3.11).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PRODUCT_LOCK := requirements/product.lock
DEV_LOCK := requirements/dev.lock
LOCK_OPTIONS := --generate-hashes --python-version 3.11 --python-platform linux

.PHONY: demo test check rehearsal lint lock java jars startup system apt clean help promtool

help:
	@echo "make demo   set up and run the whole product (dashboard on http://127.0.0.1:8050; REAL_KAFKA=0: no real cluster)"
	@echo "make test   set up and run the test suite (real broker, Spark, SQLite, Chromium)"
	@echo "make check  the fast lane: ruff and the tests that need no Spark, broker, PostgreSQL, browser or process of their own"
	@echo "make lock   regenerate the hashed locks requirements/{product,dev}.lock from pyproject.toml"

# Every package from the hashed lock (pip refuses a file whose SHA-256 is not in it), then the
# project itself without its dependencies and with the lock's setuptools (no build isolation, which
# would fetch an unpinned one). dev.lock holds the product's pins and the dev and embedded extras.
$(STAMP): pyproject.toml $(DEV_LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes -r $(DEV_LOCK)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# Regenerates the locks with uv from PyPI (itself installed from requirements/uv.lock, with hashes,
# into a venv of its own that is thrown away): product.lock (pyproject's dependencies and
# requirements/build.in: what the image installs), then dev.lock (the same plus the dev and embedded
# extras, held to product.lock's versions with -c), and uv.lock from requirements/uv.in. The pins a
# lock has are kept while they satisfy pyproject; LOCK_UPGRADE=--upgrade moves every one to the
# newest. The hashes are of every file PyPI publishes for a pin, so one lock serves any Linux
# machine of Python 3.11 (CI's and the image's alike).
lock:
	@tools="$$(mktemp -d)" && trap 'rm -rf "$$tools"' EXIT \
	  && $(PYTHON) -m venv "$$tools" \
	  && "$$tools/bin/python" -m pip install --quiet --require-hashes -r requirements/uv.lock \
	  && "$$tools/bin/uv" pip compile --quiet $(LOCK_OPTIONS) $(LOCK_UPGRADE) pyproject.toml requirements/build.in \
	       -o $(PRODUCT_LOCK) \
	  && "$$tools/bin/uv" pip compile --quiet $(LOCK_OPTIONS) pyproject.toml requirements/build.in \
	       --extra dev --extra embedded -c $(PRODUCT_LOCK) -o $(DEV_LOCK) \
	  && "$$tools/bin/uv" pip compile --quiet $(LOCK_OPTIONS) requirements/uv.in -o requirements/uv.lock

# Once per install (then a check): pyspark's bytecode inside its zip and the JVM's class archive,
# which every start of Spark would otherwise pay for again (streaming/job/startup.py).
startup: $(STAMP) java
	@$(BIN)/python -m streaming.job.startup

# What the product and the tests need from Debian, installed in one apt-get run when missing
# (we must be root with apt-get; otherwise a one-line message says what to install):
# Java 17+ for Spark; Chromium and its driver for the browser tests; PostgreSQL, Prometheus
# and Alertmanager, which the integration tests start themselves on 127.0.0.1; libfaketime, which
# runs a real Kafka controller of the tests with its clock off (streaming/workshop/kraft/node.py); Maven,
# which fetches the jars (before `jars` runs beside `startup`, so that one apt-get runs at a time).
java:
	@if ! java -version 2>&1 | grep -Eq 'version "(1[7-9]|[2-9][0-9])'; then $(MAKE) -s apt PKGS=openjdk-17-jre-headless; fi

# Real Apache Kafka 4.4 (and 4.3) for the real-Kafka tests, bench and demo, and Spark's kafka
# connector: resolved from Maven Central into var/jars once (python -m streaming.plumbing.jars list); then
# the class archive Kafka's JVMs start with (streaming/workshop/kraft/archive.py).
jars: $(STAMP) java
	@command -v mvn >/dev/null || $(MAKE) -s apt PKGS=maven
	@$(BIN)/python -m streaming.plumbing.jars fetch
	@$(BIN)/python -m streaming.workshop.kraft archive

system: java
	@missing=""; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v mvn >/dev/null || missing="$$missing maven"; \
	command -v chromedriver >/dev/null || missing="$$missing chromium-driver"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v prometheus >/dev/null || missing="$$missing prometheus"; \
	{ command -v faketime && ls /usr/lib/*/faketime/libfaketime.so.1; } >/dev/null 2>&1 || missing="$$missing faketime"; \
	{ command -v prometheus-alertmanager || command -v alertmanager; } >/dev/null || missing="$$missing prometheus-alertmanager"; \
	if [ -n "$$missing" ]; then $(MAKE) -s apt PKGS="$$missing"; fi

apt:
	@if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "fleetwatch needs these Debian packages: $(PKGS) (install them, or run make as root)"; exit 1; fi
	@echo "installing from Debian:$(PKGS)"
	@apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(PKGS) >/dev/null

# The demo runs a small real Kafka 4.4 cluster beside the simulated fleet (REAL_KAFKA=0 leaves it
# out); its jars come from Maven Central once, into var/jars. Without Java or Maven the demo
# runs without it and says so in one line.
REAL_KAFKA ?= 1
demo: $(STAMP) java startup
ifeq ($(REAL_KAFKA),1)
	@command -v mvn >/dev/null || [ "$$(id -u)" != 0 ] || $(MAKE) -s apt PKGS=maven || true
	@$(BIN)/python -m streaming.plumbing.jars fetch kafka-4.4.0 && $(BIN)/python -m streaming.workshop.kraft archive || true
	$(BIN)/fleetwatch demo --real-kafka
else
	$(BIN)/fleetwatch demo
endif

lint: $(STAMP)
	$(BIN)/ruff check .

# Three pytest lanes side by side (tests/lanes.py): most of the wall time is waiting on real parts.
# The short rehearsal of the production topology is one of the tests (tests/ops/test_deploy_standalone.py).
# Debian's packages first (one apt-get at a time), then Maven's downloads beside the class archives.
test: $(STAMP) system
	@$(MAKE) -s -j3 jars startup lint
	PYSPARK_PYTHON=$(BIN)/python $(BIN)/python tests/lanes.py --headless --webdriver Chrome -p no:cacheprovider \
	  --durations=15

# The production topology on one machine (issue 26): the bench's whole table, one kill -9 per row.
rehearsal: $(STAMP) system jars startup
	PYSPARK_PYTHON=$(BIN)/python $(BIN)/python bench/rehearsal.py

# The edit-test loop: what runs in the pytest process without Spark, a broker, real Kafka, PostgreSQL
# or a browser (the rules, the contract, the config, the notifier's planning, ...). `integration`
# tests start a fleetwatch command or a server as a process and wait on it in real time: most of
# the lane's wall time before they left it. `make test` proves the rest.
check: $(STAMP) lint promtool
	$(BIN)/pytest -p no:cacheprovider -q -m "not spark and not broker and not browser and not real_kafka and not postgres and not integration"

# The fast lane's one outside tool: Prometheus's promtool checks the shipped alerting rules' expressions.
promtool:
	@command -v promtool >/dev/null || $(MAKE) -s apt PKGS=prometheus

clean:
	rm -rf var artifacts .pytest_cache
