# The two commands of the README: `make conformance` (the main job) and `make test`.
# Each sets up what it needs on first use: a project virtual environment in .venv with
# hal installed in editable mode, its dev tools, PyOpenCL and PoCL (OpenCL on the CPU).

SHELL  := /bin/bash
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.hal-installed

.PHONY: conformance test lint unit wheel-test cuda-compile opencl-nvptx opencl-profiles opencl-whole-pool opencl-intel opencl-oclgrind clean

# Every HAL_OPENCL_PROFILE runs the op tests on PoCL (emulation: the profile's tuning
# parameters and code paths on the CPU's OpenCL driver, the real device's limits). PoCL's own
# profile is the unit job's: with no HAL_OPENCL_PROFILE, PoCL is tuned as itself.
PROFILES := amd-gcn amd-cdna amd-rdna mali-midgard mali-bifrost mali-valhall adreno5xx adreno6xx adreno7xx \
            intel-gen9 intel-xe nvidia

# The test processes run side by side, one a core, each with a single PoCL thread: most of
# their time is single-threaded (PoCL's LLVM builds of each profile's kernels, the CUDA
# emulator's g++ builds, hypothesis), and two PoCL thread pools on two cores starve each other
# (a profile took 346 s instead of 25 s beside nvcc's builds). The opencl-whole-pool target keeps
# PoCL's whole pool, so that work-groups still run concurrently somewhere (the statistics
# merges, the global atomics).
JOBS   := $(shell nproc 2>/dev/null || echo 2)
POCL_1 := POCL_MAX_PTHREAD_COUNT=1 POCL_CPU_MAX_CU_COUNT=1
OPENCL_TESTS := tests/test_pooling.py tests/test_conv.py tests/test_batch_norm.py tests/test_quant.py tests/test_nn.py

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' || \
		{ echo "hal needs Python 3.10 or newer (found $$($(PYTHON) --version))"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev,pocl]"
	$(BIN)/python tools/ensure_pocl.py
	@touch $(STAMP)

conformance: $(STAMP)
	$(BIN)/hal devices
	$(BIN)/hal conformance

# The targets one after another, each followed by its wall time, so that a CI log shows where the 15 minutes go
TEST_TARGETS := lint cuda-compile opencl-nvptx wheel-test opencl-profiles unit opencl-whole-pool opencl-intel opencl-oclgrind
test: $(STAMP)
	@start=$$(date +%s); for t in $(TEST_TARGETS); do s=$$(date +%s); \
		$(MAKE) --no-print-directory $$t || exit 1; echo "make test: $$t took $$(( $$(date +%s) - s )) s"; done; \
		echo "make test: all passed in $$(( $$(date +%s) - start )) s"

# ruff, then mypy over hal as installed, backends/ as hal.backends ([tool.mypy] in pyproject.toml)
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python tools/mypy_installed.py

# PoCL builds without its optimiser here (-cl-opt-disable: a cold build 2.5x faster, one BatchNorm
# grid case 15.9 -> 6.9 s); the whole-pool run below builds optimised, as a driver does
unit: $(STAMP)
	$(POCL_1) HAL_OPENCL_BUILD_OPTIONS=-cl-opt-disable $(BIN)/python -m pytest -q -p no:cacheprovider -n $(JOBS) --dist worksteal

cuda-compile: $(STAMP)
	$(BIN)/python tools/nvcc_check.py

# The OpenCL kernels' NVIDIA-only inline-PTX paths, which PoCL never builds (clang for nvptx).
opencl-nvptx: $(STAMP)
	$(BIN)/python tools/opencl_nvptx_check.py

# Build the wheel, install it into a fresh environment and use it from outside the repository.
wheel-test: $(STAMP)
	rm -rf build dist $(VENV)-wheel
	$(BIN)/python -m pip wheel -q --no-deps -w dist .
	$(PYTHON) -m venv $(VENV)-wheel
	$(VENV)-wheel/bin/python -m pip install -q dist/hal_kernels-*.whl
	cd "$$(mktemp -d)" && $(CURDIR)/$(VENV)-wheel/bin/hal conformance --device cpu --quick --dtype float32,float16,bfloat16,int8

# One line a profile (its pytest summary), $(JOBS) profiles at a time; any failure prints its log's
# tail and fails the target. A profile differs from PoCL's own only in the table entries it matches,
# so a profile matching the same entries as one before it is not run again (tools/opencl_profiles.py
# names it), and the tests that force their own parameters (marker forced_params) run once, in the
# unit job. The emulated profiles build with -cl-opt-disable: PoCL's optimising builds are most of
# their time (a profile's first run 219 s, 99 s without), and what they check is the profile's code
# paths; the whole-pool run builds as a driver does.
opencl-profiles: $(STAMP)
	@set -o pipefail; $(BIN)/python tools/opencl_profiles.py $(PROFILES) | xargs -P $(JOBS) -I{} bash -c 'set -o pipefail; \
		out=$$(HAL_OPENCL_PROFILE={} HAL_TEST_EXAMPLES=8 HAL_OPENCL_BUILD_OPTIONS=-cl-opt-disable $(POCL_1) \
			$(BIN)/python -m pytest -q -p no:cacheprovider -m "opencl and not forced_params" $(OPENCL_TESTS) 2>&1); \
		rc=$$?; echo "  {}: $$(echo "$$out" | tail -1)"; if [ $$rc -ne 0 ]; then echo "$$out" | tail -60; fi; exit $$rc'

# The OpenCL op tests once more, with PoCL's optimiser and its whole thread pool (work-groups run
# concurrently): every op through the tables' parameters; the forced_params tests ran in the unit job
opencl-whole-pool: $(STAMP)
	set -o pipefail; HAL_TEST_EXAMPLES=8 $(BIN)/python -m pytest -q -p no:cacheprovider -m "opencl and not forced_params" \
		$(OPENCL_TESTS) | tail -1

# A second OpenCL implementation: Intel's CPU runtime from PyPI (x86-64 Linux), whose compiler
# is not PoCL's and which has cl_khr_fp16, so the native-half paths (HALF_ARITH, which the AMD,
# Mali and Adreno tables ask for) are built and checked somewhere. Registered for these runs
# only, through OCL_ICD_VENDORS (PyOpenCL's loader adds its PoCL anyway): opencl:0 stays PoCL
# everywhere else. Runs: the conformance suite in every dtype; the OpenCL op tests and the
# forced native-half tests; float16 conformance under every distinct emulated profile.
INTEL_STAMP := $(VENV)/.intel-ocl-installed
INTEL_ICD   := $(CURDIR)/$(VENV)/etc/hal-opencl-vendors
INTEL_ENV   := OCL_ICD_VENDORS=$(INTEL_ICD)
INTEL_OK    := $(shell [ "$$(uname -sm)" = "Linux x86_64" ] && echo yes)

$(INTEL_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e ".[intel-cpu]"
	mkdir -p $(INTEL_ICD) && echo "$(CURDIR)/$(VENV)/lib/libintelocl.so" > $(INTEL_ICD)/intel-cpu.icd
	@touch $(INTEL_STAMP)

ifeq ($(INTEL_OK),yes)
opencl-intel: $(INTEL_STAMP)
	$(INTEL_ENV) $(BIN)/hal devices
	set -o pipefail; $(INTEL_ENV) $(BIN)/hal conformance --device opencl:intel --dtype float32,float16,bfloat16,int8,uint8 | tail -1
	set -o pipefail; $(INTEL_ENV) HAL_TEST_EXAMPLES=8 $(BIN)/python -m pytest -q -p no:cacheprovider -n $(JOBS) \
		--devices opencl:intel -m opencl $(OPENCL_TESTS) tests/test_opencl_half_arith.py tests/test_bf16_opencl.py | tail -1
	@set -o pipefail; $(BIN)/python tools/opencl_profiles.py $(PROFILES) 2>/dev/null | xargs -P $(JOBS) -I{} bash -c \
		'out=$$(HAL_OPENCL_PROFILE={} $(INTEL_ENV) $(BIN)/hal conformance --device opencl:intel --dtype float16 2>&1); \
		rc=$$?; echo "  intel {}: $$(echo "$$out" | tail -1)"; if [ $$rc -ne 0 ]; then echo "$$out" | tail -40; fi; exit $$rc'
else
opencl-intel:
	@echo "opencl-intel: skipped: Intel's CPU OpenCL runtime is for x86-64 Linux (this is $$(uname -sm))"
endif

# Oclgrind (an OpenCL simulator that checks every access; apt-get installed when this is root,
# else skipped) with its data-race check and buffers of exactly their tensors' bytes: a planted
# out-of-bounds write and race first, then conformance in every dtype and the BatchNorm (its
# cross-group statistics merge), pooling and quantization op tests at the parameters the tables
# serve. Any report in its log fails the target. The forced-parameter tests are left out:
# Oclgrind 21.10 miscomputes operations that the pooling row strips and packed int8 kernels use
# (the script probes and names them; docs/backend-opencl.md); the conv tests (100 s) too.
opencl-oclgrind: $(STAMP)
	$(BIN)/python tools/opencl_oclgrind.py --tests tests/test_batch_norm.py tests/test_pooling.py tests/test_quant.py tests/test_bf16_opencl.py \
		--examples 4 --jobs $(JOBS)

clean:
	rm -rf $(VENV) $(VENV)-wheel build dist *.egg-info
