# The two commands of the README. scripts/setup.sh prints the interpreter to use: the active one when it has
# everything (nothing is installed), else ./.venv. flagperf runs from this checkout as `python -m flagperf`;
# `make run` also puts a `flagperf` command on PATH (setup.sh --link) and ends with how to reach it.
.PHONY: run test
run:            ## set up, then run the embedded default test config (configs/test_conf.yaml, localhost)
	py="$$(scripts/setup.sh --link)" && { "$$py" -m flagperf run; code=$$?; scripts/setup.sh --path-note; exit $$code; }

test:           ## set up with the test tools, then lint, type-check and run every test
	py="$$(scripts/setup.sh --test)" && "$$py" -m ruff check . && "$$py" -m mypy && \
	PYTHONPATH="$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH}" "$$py" -m pytest -q tests
