# Odyssey: the two set-up commands are `make run` and `make test`; everything else is a step of them.
# deps -> build -> test/run. ODYSSEY_DEPS_DIR moves the cached LibTorch venv (default ~/.cache/odyssey).

DEPS_DIR  ?= $(if $(ODYSSEY_DEPS_DIR),$(ODYSSEY_DEPS_DIR),$(HOME)/.cache/odyssey)
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS      ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps configure build test run bench fuzz clean

all: build

deps:
	@ODYSSEY_DEPS_DIR="$(DEPS_DIR)" scripts/deps.sh

configure: deps
	@mkdir -p $(BUILD_DIR)
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	    -DODYSSEY_DEPS_DIR="$(DEPS_DIR)" $(CMAKE_ARGS) >$(BUILD_DIR)/configure.log 2>&1 \
	  || { cat $(BUILD_DIR)/configure.log; exit 1; }
	@grep -E "^-- Odyssey|odyssey:" $(BUILD_DIR)/configure.log || true

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@ctest --test-dir $(BUILD_DIR) --output-on-failure --timeout 900 -j $(JOBS)

run: build
	@scripts/run.sh "$(BUILD_DIR)"

bench: build
	@$(BUILD_DIR)/bin/odyssey bench presets/tiny-cpu.toml

fuzz:
	@scripts/fuzz.sh

clean:
	rm -rf $(BUILD_DIR)
