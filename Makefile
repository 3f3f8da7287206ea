# Odyssey: the two set-up commands are `make run` and `make test`; everything else is a step of them.
# deps -> build -> test/run; `make screenshots` re-renders the docs' pictures. ODYSSEY_DEPS_DIR moves
# the cached LibTorch venv (default ~/.cache/odyssey).

DEPS_DIR  ?= $(if $(ODYSSEY_DEPS_DIR),$(ODYSSEY_DEPS_DIR),$(HOME)/.cache/odyssey)
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS      ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps configure build test run bench fuzz screenshots clean

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

# The pictures of README.md and docs/studio.md, rendered by the studio itself under Xvfb, so they
# show what the planner says today (a quiet machine gives the throughput picture honest step times);
# the Eval panel's shows a small real evaluation that scripts/eval_demo.sh makes first.
XVFB := xvfb-run -a -s "-screen 0 1600x1000x24"
screenshots: build
	$(XVFB) $(BUILD_DIR)/bin/odyssey-studio presets/llama3-8b-3m-8xh100.toml \
	    --panel plan --size 1440x900 --screenshot assets/studio-plan.png
	$(XVFB) $(BUILD_DIR)/bin/odyssey-studio presets/tiny-cpu.toml \
	    --run-steps 8 --panel timeline --size 1440x900 --screenshot assets/studio-timeline.png
	$(XVFB) $(BUILD_DIR)/bin/odyssey-studio presets/tiny-cpu.toml \
	    --run-steps 40 --change-at 12:memory.tiled_mlp=false --change-at 26:memory.offload_activations=false \
	    --change-at 26:memory.activation_checkpointing=false --panel throughput --size 1440x900 \
	    --screenshot assets/studio-throughput.png
	scripts/eval_demo.sh $(BUILD_DIR) $(BUILD_DIR)/eval-demo
	$(XVFB) $(BUILD_DIR)/bin/odyssey-studio presets/tiny-cpu.toml --set output.dir=$(BUILD_DIR)/eval-demo/run \
	    --panel eval --size 1440x900 --screenshot assets/studio-eval.png

clean:
	rm -rf $(BUILD_DIR)
