# The two commands of the README.
.PHONY: run test
run:            ## set up .venv, then run the embedded default (localhost) test config
	scripts/setup.sh
	.venv/bin/flagperf run --config configs/test_conf.yaml

test:           ## set up .venv with the test tools, then run every test
	scripts/setup.sh --test
	.venv/bin/python -m pytest -q tests
