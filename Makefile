# Makefile — a thin front door around CMake; every real build rule lives in CMakeLists.txt.
#
#   make demo       install deps, configure build/ (Release), build only the main job's program and
#                   the libraries it links (no tests, no benchmarks), run it (train on Fashion-MNIST)
#   make test       install deps, build, run every ctest (those labelled gpu skip, with the
#                   reason, when no GPU is usable)
#   make test-slow  only the tests labelled slow
#   make test-op    what an op's definition feeds, in the build/ already configured: test_ops (its
#                   samples, gradcheck, 16-bit rounding, PyTorch fixtures, the op table), the CUDA
#                   kernel coverage table and docs/autocast-policy.md against the registry
#   make asan       ASan+UBSan build in build-asan/ and its tests (CPU-only: -DMIXTAPE_CUDA=OFF)
#   make test-emulator  the CUDA backend on the CPU (-DMIXTAPE_CUDA=EMULATOR, build-emu/): every GPU
#                   test, bench_gpu_step's SmallCNN steps and the main job with --device auto
#   make gpu-check  scripts/gpu-check.sh on a machine with an NVIDIA GPU (logs in gpu-check-logs/)
#   make bench      build and run the benchmark programs (build/bench)
#   make clean      remove the build directories
#
# Override on the command line, e.g. `make test BUILD_DIR=/tmp/b CTEST_ARGS="-R tensor"`.

BUILD_DIR  ?= build
ASAN_DIR   ?= build-asan
EMU_DIR    ?= build-emu
JOBS       ?= $(shell nproc)
CMAKE      ?= cmake
CTEST      ?= ctest

# The main job `make demo` runs: SmallCNN on Fashion-MNIST (Debian's dataset-fashion-mnist),
# 3 epochs of SGD lr 0.05 momentum 0.9 with a cosine schedule (linear warmup, cosine decay to 0),
# batch 128; test accuracy at the end, metrics (CSV), summary (JSON) and the curves (SVG) in
# out/fashion_mnist/.
MAIN_JOB   ?= $(BUILD_DIR)/examples/train_fashion_mnist --model smallcnn --epochs 3 --batch-size 128 --lr 0.05 --momentum 0.9 --schedule cosine
# What `make demo` builds: the main job's program and the libraries it links, nothing else, so a
# newcomer's first command does not wait for every test and benchmark; `make test` (same build
# directory, same configuration, CUDA backend included when nvcc is found) reuses all of it and
# builds the rest. Without a GPU, cmake/Cuda.cmake compiles one CUDA architecture.
DEMO_TARGETS ?= train_fashion_mnist

CMAKE_ARGS ?=
CTEST_ARGS ?=
# Sanitizer runs skip gpu, slow and install tests (slow ones run 2-5x slower under ASan and already
# run in the Release build; the install tests configure and build outside projects, which is
# packaging, not memory safety, and run in the Release build too); `make asan ASAN_EXCLUDE=gpu`
# runs them as well. The sanitizer build makes one ctest per test binary (tests/CMakeLists.txt).
# The sanitizer build is the CPU-only configuration (-DMIXTAPE_CUDA=OFF): nvcc takes no
# sanitizer flags, and CI must build and pass mixtape without CUDA too — this is where it does.
ASAN_EXCLUDE ?= gpu|slow|install
ASAN_ENV   ?= UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# -g1 (line tables) is all a sanitizer report needs for file:line stacks, and builds much faster
# than full debug info. -O1 (ASan's recommendation) compiles ~40% faster than -O2 under the
# sanitizers; the tests, mostly process start-up, run about as fast.
ASAN_OPT_FLAGS ?= -O1 -g1 -DNDEBUG

# The steps form a chain (deps -> configure -> build -> run), never run side by side.
.NOTPARALLEL:
.PHONY: deps configure build demo test test-slow test-op asan test-emulator bench gpu-check clean

deps:
	scripts/install-deps.sh

configure: deps
	$(CMAKE) -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

build: configure
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS)

demo: configure
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS) --target $(DEMO_TARGETS)
	$(MAIN_JOB)

# Every test, gpu-labelled ones included: without a GPU they report "skipped" (with the
# reason), so CI shows them rather than hiding them.
test: build
	$(CTEST) --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) --no-tests=error $(CTEST_ARGS)

test-slow: build
	$(CTEST) --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) -L '^slow$$' --no-tests=ignore $(CTEST_ARGS)

# Everything an op's definition feeds (docs/adding-an-op.md), built and run as whole binaries (one
# process each: test_ops' cases as ctest entries would start a process per case). The CUDA parity of
# the samples is test_cuda_ops (make test-emulator, or a GPU).
OP_TESTS ?= test_ops test_cuda_coverage test_autocast_policy_doc
test-op:
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS) --target $(OP_TESTS)
	@# From build/tests, as ctest runs them (the policy-doc test reads ../../docs/autocast-policy.md).
	set -e; cd $(BUILD_DIR)/tests && for t in $(OP_TESTS); do ./$$t --gtest_brief=1; done

asan: deps
	$(CMAKE) -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(ASAN_OPT_FLAGS)" -DMIXTAPE_SANITIZE=ON -DMIXTAPE_BUILD_BENCH=OFF \
	  -DMIXTAPE_CUDA=OFF
	$(CMAKE) --build $(ASAN_DIR) -j $(JOBS)
	$(ASAN_ENV) $(CTEST) --test-dir $(ASAN_DIR) --output-on-failure -j $(JOBS) \
	  -LE '^($(ASAN_EXCLUDE))$$' --no-tests=error $(CTEST_ARGS)

# The GPU suites, the emulator's own tests, the GPU benchmark's SmallCNN steps, the main job on
# CUDA, and two ranks with CUDA tensors (NCCL's collectives, DDP, the main job) under mpirun, with
# the device side run on the CPU by the CUDA emulator (tests/cuda_emulator/emulator.h):
# only what those need is built.
EMU_TARGETS ?= test_cuda_runtime test_cuda_ops test_cuda_amp test_cuda_emulator train_fashion_mnist bench_gpu_step bench_host_step
test-emulator: deps
	$(CMAKE) -S . -B $(EMU_DIR) -DCMAKE_BUILD_TYPE=Release -DMIXTAPE_CUDA=EMULATOR -DMIXTAPE_BUILD_BENCH=ON
	$(CMAKE) --build $(EMU_DIR) -j $(JOBS) --target $(EMU_TARGETS)
	@# The two-rank CUDA tests exist only where MPI was found (mpirun, libopenmpi-dev).
	if $(CTEST) --test-dir $(EMU_DIR) -N -R '^distributed_two_ranks$$' | grep -q 'Total Tests: 1'; then \
	  $(CMAKE) --build $(EMU_DIR) -j $(JOBS) --target test_distributed_mpi; fi
	$(CTEST) --test-dir $(EMU_DIR) --output-on-failure -j $(JOBS) -L '^(gpu|cuda_emulator|gpu_selfcheck|gpu_bench_smoke)$$' \
	  --no-tests=error $(CTEST_ARGS)
	$(CTEST) --test-dir $(EMU_DIR) --output-on-failure \
	  -R '^(example_train_fashion_mnist_device_auto|distributed_two_ranks|distributed_two_ranks_cuda_graph_host_path|example_train_two_ranks_cuda|distributed_nccl_watchdog_.*)$$' \
	  --no-tests=error $(CTEST_ARGS)

# Runs every Google Benchmark program (bench/CMakeLists.txt names them bench_<name>); the
# exhaustive conversion check there is a ctest (label slow), not run here. BENCH_ARGS go to
# each program, e.g. BENCH_ARGS=--benchmark_filter=matmul.
BENCH_ARGS ?=
bench: CMAKE_ARGS += -DMIXTAPE_BUILD_BENCH=ON
bench: build
	@set -e; found=0; \
	for b in $$(find $(BUILD_DIR)/bench -maxdepth 1 -type f -name 'bench_*' -perm -u+x | sort); do \
	  found=1; echo "== $$b"; $$b $(BENCH_ARGS); \
	done; \
	[ $$found = 1 ] || echo "make bench: no benchmark programs in $(BUILD_DIR)/bench yet"

# Configure for the local GPU's arch, build, run every test and the GPU benchmarks, print a table.
GPU_CHECK_LOGS ?= gpu-check-logs
gpu-check:
	scripts/gpu-check.sh $(GPU_CHECK_LOGS)

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(EMU_DIR)
