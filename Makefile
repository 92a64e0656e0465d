# The two set-up commands are `make demo` and `make test`; each creates .venv when missing.
PY_BOOT := $(shell .ci/find-python)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP_RUN := $(VENV)/.stamp-run
STAMP_DEV := $(VENV)/.stamp-dev
STAMP_BENCH := $(VENV)/.stamp-bench
PKG_DIRS := eventlog projections backends
# Smoke runs write their JSON here, never over the published figures in benchmarks/results/.
SMOKE_OUT := $(shell mktemp -d)

.PHONY: demo test test-long test-fast lint type check bench-smoke bench soak clean

$(PY):
	$(PY_BOOT) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(PY)
	$(PIP) install --quiet -e .
	touch $@

$(STAMP_DEV): pyproject.toml | $(PY)
	$(PIP) install --quiet -e '.[dev]'
	touch $@ $(STAMP_RUN)

$(STAMP_BENCH): pyproject.toml | $(PY)
	$(PIP) install --quiet -e '.[dev,bench]'
	touch $@ $(STAMP_DEV) $(STAMP_RUN)

demo: $(STAMP_RUN)
	$(PY) -m eventlog.demo --path demo-data/fanout.ckpt

test: $(STAMP_DEV)  # everything but the soak-sized tests (marked long): under 15 minutes
	.ci/system-packages
	$(PY) -m pytest -q -m "not long" -n 2

test-long: $(STAMP_DEV)  # the soak-sized tests make test leaves out (CI runs both)
	.ci/system-packages
	$(PY) -m pytest -q -m long

test-fast: $(STAMP_DEV)  # everything but the tests marked slow (over a few seconds each)
	.ci/system-packages
	$(PY) -m pytest -q -m "not slow and not long"

lint: $(STAMP_DEV)
	$(VENV)/bin/ruff check $(PKG_DIRS) tests benchmarks soak
	$(VENV)/bin/ruff format --check $(PKG_DIRS) soak

type: $(STAMP_DEV)
	$(VENV)/bin/mypy

check: lint type test

bench-smoke: $(STAMP_DEV)
	$(PY) -m benchmarks run --quick
	$(PY) -m benchmarks run --quick --duration 2s --backend ckptlog,sqlite-rows --out $(SMOKE_OUT)/sustained.json
	$(PY) -m benchmarks run --quick --scenario openloop --rate 200,400 --arrivals poisson --seed 7 --backend ckptlog,sqlite-rows --out $(SMOKE_OUT)/rate.json
	$(PY) -m benchmarks compare benchmarks/results/bench.json benchmarks/results/bench.quick.json
	$(PY) -m benchmarks.log_append --quick --json $(SMOKE_OUT)/log_append.json
	$(PY) -m benchmarks.checkpoints --quick --out $(SMOKE_OUT)/checkpoints.json
	$(PY) -m benchmarks.langgraph_growth --quick --out $(SMOKE_OUT)/langgraph_growth.json
	$(PY) -m benchmarks.langgraph_read --quick --out $(SMOKE_OUT)/langgraph_read.json
	$(PY) -m benchmarks.langgraph_read --quick --pg --out $(SMOKE_OUT)/langgraph_read_pg.json
	$(PY) -m benchmarks.langgraph_show --short 6 --long 40 --repeat 1 --json $(SMOKE_OUT)/langgraph_show.json
	$(PY) -m benchmarks.forensics --quick --out $(SMOKE_OUT)/forensics.json
	$(PY) -m benchmarks.openarmature_fanout --quick --out $(SMOKE_OUT)/openarmature_fanout.json
	$(PY) -m benchmarks.pg_compare --quick --out $(SMOKE_OUT)/pg_compare.json
	$(PY) -m benchmarks.durable_commit --quick --out $(SMOKE_OUT)/durable_commit.json
	$(PY) -m benchmarks.cold_commit --quick --out $(SMOKE_OUT)/cold_commit.json
	$(PY) -m benchmarks.export_parquet --quick --out $(SMOKE_OUT)/export_parquet.json
	$(PY) -m benchmarks.tail_lag --quick --out $(SMOKE_OUT)/tail_lag.json

bench: $(STAMP_BENCH)
	$(PY) -m benchmarks run --doc
	$(PY) -m benchmarks.log_append
	$(PY) -m benchmarks.checkpoints
	$(PY) -m benchmarks.langgraph_growth
	$(PY) -m benchmarks.langgraph_read
	$(PY) -m benchmarks.langgraph_read --pg --out benchmarks/results/langgraph_read_pg.json
	$(PY) -m benchmarks.langgraph_show
	$(PY) -m benchmarks.forensics
	$(PY) -m benchmarks.openarmature_fanout --sizes 1000
	$(PY) -m benchmarks.pg_compare --doc  # the PostgreSQL section of docs/benchmarks.md
	$(PY) -m benchmarks.durable_commit  # issue 28: docs/benchmarks.md, "One device flush"
	$(PY) -m benchmarks.cold_commit  # issue 28: a commit's CPU after a wait for the device
	$(PY) -m benchmarks.export_parquet  # issue 25: Parquet export of 1,000,000 frames
	$(PY) -m benchmarks.tail_lag  # issue 25: ckptlog tail, commit -> line, writer's cost

# The reliability campaign (docs/reliability.md): seeded kills, faults, damage, bad input.
# Short by default (a few minutes); `make soak SOAK_ARGS=--long` runs >= 1,000 kills.
SOAK_ARGS ?=
soak: $(STAMP_DEV)
	$(PY) -m soak --out docs/reliability.md $(SOAK_ARGS)

clean:
	rm -rf $(VENV) demo-data .pytest_cache .mypy_cache .ruff_cache
