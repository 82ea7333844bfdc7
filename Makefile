# sqljobs developer tasks. `make` (or `make help`) lists them.
#
# PYTHON is the interpreter of your development virtualenv (pip install -e '.[test,dev]').
# The tests use $SQLJOBS_TEST_DSN when set, else find a server themselves (see README.md).

PYTHON ?= python
PYTEST ?= $(PYTHON) -m pytest

.DEFAULT_GOAL := help
.PHONY: help test sqltest test-limits test-stalls chaos citus citus-cluster fuzz lint verify revision snapshot bench \
	bench-citus citus-probe bench-retention bench-pressure bench-pressure-short screenshots docs

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z-]*:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

test: ## run every test: pytest and the pgTAP files in sqltests/
	$(PYTEST)

sqltest: ## run only the pgTAP files in sqltests/
	$(PYTEST) sqltests/

test-limits: ## the fleet races of tests/test_limits_processes.py at full size (5,000 jobs)
	SQLJOBS_RACE_JOBS=5000 $(PYTEST) tests/test_limits_processes.py

test-stalls: ## tests/test_stalls_processes.py with crash recovery under a 20,000-job backlog
	SQLJOBS_STALL_BACKLOG=20000 $(PYTEST) -s tests/test_stalls_processes.py

chaos: ## the chaos suite's full profile: 100,000 jobs, 1,000 SIGKILLs, every scenario (about an hour; docs/howto-chaos.md)
	$(PYTHON) -m bench.chaos --profile full --json bench/chaos-results.json --report bench/CHAOS.md

citus: ## build Citus from ../shared/vendor if missing (root), then tests/test_citus*.py on local 3-node clusters
	bash ../shared/vendor/build-citus.sh
	SQLJOBS_REQUIRE_CITUS=1 $(PYTEST) tests/test_citus.py tests/test_citus_distributed.py

citus-cluster: ## start a local Citus cluster (coordinator + 2 workers) in ./.citus until Ctrl-C
	$(PYTHON) -m tests.harness.citus .citus

fuzz: ## tests/test_fuzz_sql.py's longer profile: 500 examples per SQL function (FUZZ_EXAMPLES=N)
	SQLJOBS_FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-500} $(PYTEST) tests/test_fuzz_sql.py

# The release pipeline (docs/design/schema-upgrades.md): sql/ is the source; the unreleased
# revision and the catalog snapshot are written from it, never by hand. ADMIN_DSN is a
# server to make scratch databases on (default: 127.0.0.1:5432).
ADMIN_DSN ?= postgresql://postgres@127.0.0.1:5432/postgres

revision: ## write the unreleased schema revision from sql/ (NAME=<slug> starts the next one), and the snapshot
	$(PYTHON) -m tools.revision --dsn $(ADMIN_DSN) $(if $(NAME),--name $(NAME))
	$(PYTHON) -m tools.snapshot --dsn $(ADMIN_DSN)

snapshot: ## write sql/catalog.snapshot, what sql/ installs, for review
	$(PYTHON) -m tools.snapshot --dsn $(ADMIN_DSN)

verify: lint ## lint, and fail when the unreleased revision or the catalog snapshot is stale
	$(PYTHON) -m tools.revision --dsn $(ADMIN_DSN) --check
	$(PYTHON) -m tools.snapshot --dsn $(ADMIN_DSN) --check

lint: ## ruff, mypy (strict on pyclient/) and the package layers (import-linter)
	$(PYTHON) -m ruff check .
	$(PYTHON) -m mypy
	lint-imports

bench: ## the benchmark suite, peers included (about 2 hours; docs/benchmarks.md)
	$(PYTHON) -m pip install --quiet -e '.[bench]'
	$(PYTHON) -m bench

citus-probe: ## every pgTAP file on the engine with its hot tables distributed, on a local 3-node cluster: what still fails (docs/design/citus.md)
	$(PYTHON) -m bench.citus_probe

bench-citus: ## the engine distributed and beside Citus, and the distributed prototype, on a local 3-node cluster (about 10 minutes; docs/design/citus.md)
	$(PYTHON) -m bench.citus --repeat 3

bench-retention: ## sqljobs' sustained run with 60 s retention, 10 minutes (docs/benchmarks.md)
	$(PYTHON) -m pip install --quiet -e '.[bench]'
	$(PYTHON) -m bench --part sustained --system sqljobs_retention --sustained-seconds 600

bench-pressure: ## the pressure cells, every queue system, 3 min per cell at 400 jobs/s (about 2.5 hours)
	$(PYTHON) -m pip install --quiet -e '.[bench]'
	$(PYTHON) -m bench --part pressure --pressure-profile long

bench-pressure-short: ## the pressure cells' short profile: 30 s per cell at 100 jobs/s (about 30 minutes)
	$(PYTHON) -m pip install --quiet -e '.[bench]'
	$(PYTHON) -m bench --part pressure --pressure-profile short

screenshots: ## the dashboard's screenshots in docs/img/, taken by its browser test (Debian's chromium)
	SQLJOBS_REQUIRE_BROWSER=1 SQLJOBS_SCREENSHOTS_DIR=docs/img $(PYTEST) tests/test_dashboard_browser.py

docs: ## build the documentation site (mkdocs, strict)
	@if [ -f mkdocs.yml ]; then \
		$(PYTHON) -m mkdocs build --strict; \
	else \
		echo "no mkdocs.yml: the docs are plain Markdown under docs/ (nothing to build)"; \
	fi
