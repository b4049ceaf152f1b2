# Two commands do all the set-up (see README): `make demo` and `make test`.
PY ?= python3

.PHONY: demo test bench course slides

# Install the package and run the flagship scenario (taxi vs bus).
demo:
	$(PY) -m pip install -q -e . && $(PY) -m batchsim

# Install everything the tests need and run them. torch: keep an installed build (a user's
# CUDA build is fine); otherwise take 2.13.0, which on the course machines is a local CPU wheel.
test:
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[all]"
	$(PY) -m pytest -q

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
