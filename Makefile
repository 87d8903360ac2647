# `make demo` and `make test` set everything up on a fresh machine (Debian, Python 3.11).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint java browser clean help

help:
	@echo "make demo   set up and run the whole product (dashboard on http://127.0.0.1:8050)"
	@echo "make test   set up and run the test suite (real broker, Spark, SQLite, Chromium)"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

# Spark needs Java 17+. Installed from Debian when missing and we may (root + apt-get).
java:
	@if ! java -version 2>&1 | grep -Eq 'version "(1[7-9]|[2-9][0-9])'; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Java 17 (openjdk-17-jre-headless) for Spark"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null; \
	  else \
	    echo "fleetwatch needs Java 17 or newer for Spark (e.g. apt-get install openjdk-17-jre-headless)"; exit 1; \
	  fi; \
	fi

# Headless Chromium and its driver for the dashboard's browser tests.
browser:
	@if ! { command -v chromium && command -v chromedriver; } >/dev/null; then \
	  echo "installing chromium and chromium-driver for the browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	fi

demo: $(STAMP) java
	$(BIN)/fleetwatch demo

lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP) java browser lint
	PYSPARK_PYTHON=$(BIN)/python $(BIN)/pytest --headless --webdriver Chrome -p no:cacheprovider

clean:
	rm -rf var artifacts .pytest_cache
