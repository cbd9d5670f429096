# Front door: `make serve` runs the server on the bundled tiny model, `make test` runs every test that needs
# no GPU. Both install what they need first (`make deps`, Debian apt-get, idempotent). `make dist` packs a
# relocatable bundle of `m3` (dist/, docs/deployment.md), `make docker` an image of it.
BUILD ?= build
FUZZ_BUILD ?= $(BUILD)-fuzz
DIST_BUILD ?= build-dist
DIST_DIR ?= dist
IMAGE ?= m3serve
JOBS ?= $(shell nproc)
CUDA ?= $(shell command -v nvcc >/dev/null 2>&1 || test -x /usr/local/cuda/bin/nvcc && echo 1 || echo 0)
TINY_MODEL := $(BUILD)/tiny-m3
MODEL ?= $(TINY_MODEL)
PORT ?= 8000
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

APT_PACKAGES := build-essential cmake ninja-build pkg-config git clang libclang-rt-14-dev \
  nlohmann-json3-dev libcli11-dev libpcre2-dev libutf8proc-dev libyaml-cpp-dev libgtest-dev libgmock-dev \
  libboost-dev zlib1g-dev libbrotli-dev libjpeg62-turbo-dev libpng-dev libwebp-dev \
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev libcurl4-openssl-dev libopenmpi-dev openmpi-bin curl patchelf

ifeq ($(CUDA),1)
  NVCC := $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
  CUDA_FLAGS := -DM3_CUDA=ON -DCMAKE_CUDA_COMPILER=$(NVCC)
else
  CUDA_FLAGS := -DM3_CUDA=OFF
endif

.PHONY: deps build test fuzz-smoke serve tiny-model dist docker clean format

deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	command -v node >/dev/null 2>&1 || missing="$$missing nodejs"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@cd tests/e2e/server && lock=node_modules/.package-lock.json && \
	if [ ! -e $$lock ] || [ package-lock.json -nt $$lock ]; then npm ci --no-audit --no-fund; fi

build:
	cmake -S . -B $(BUILD) -G Ninja $(CUDA_FLAGS) $(CMAKE_ARGS)
	cmake --build $(BUILD) -j $(JOBS)

test: deps build fuzz-smoke
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

fuzz-smoke:
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DM3_LIBFUZZER=ON -DM3_TOP_MODULE=grammar -DCMAKE_BUILD_TYPE=Release
	cmake --build $(FUZZ_BUILD) -j $(JOBS)
	cd $(FUZZ_BUILD) && ctest --output-on-failure -L fuzz-smoke

# The bundled demo model: random weights at tiny widths with the real MiniMax-M3 tokenizer and chat template
# (52 MB, so it is generated at build time rather than committed).
$(TINY_MODEL)/config.json: $(BUILD)/m3
	$(BUILD)/m3 make-random-model --preset tiny --out $(TINY_MODEL) --tokenizer-from tests/fixtures/minimax-m3

tiny-model: build $(TINY_MODEL)/config.json

# OpenMP threads of the CPU backend wait passively so they do not starve the HTTP threads between steps.
serve: deps build tiny-model
	OMP_WAIT_POLICY=PASSIVE $(BUILD)/m3 serve $(MODEL) --port $(PORT) --served-model-name minimax-m3 --block-size 128 \
	  --reasoning-parser minimax_m3 --tool-call-parser minimax_m3 --enable-auto-tool-choice $(ARGS)

# dist/m3serve-<version>-<arch>[-cuda<major>]/ (+ .tar.gz): bin/m3 with every library it needs but glibc and the
# NVIDIA driver, built in $(DIST_BUILD) (tools/dist/bundle.sh says what goes in and why).
dist: deps
	CUDA=$(CUDA) NVCC=$(NVCC) DIST_BUILD=$(DIST_BUILD) DIST_DIR=$(DIST_DIR) JOBS=$(JOBS) CMAKE_ARGS="$(CMAKE_ARGS)" \
	  tools/dist/bundle.sh

# The Dockerfile's image of that bundle (NVIDIA CUDA runtime base), tagged $(IMAGE):<version>.
docker: dist
	@name=$$(CUDA=$(CUDA) NVCC=$(NVCC) tools/dist/bundle.sh --name); \
	tag=$(IMAGE):$$(echo $$name | cut -d- -f2); \
	cmd="docker build --build-arg BUNDLE=$(DIST_DIR)/$$name -t $$tag ."; \
	if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then echo "$$cmd"; $$cmd; \
	else echo "no docker daemon here: copy this tree's Dockerfile, .dockerignore and $(DIST_DIR)/$$name/ to a docker host and run"; \
	  echo "  $$cmd"; fi

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD) $(DIST_BUILD) $(DIST_DIR)

format:
	git ls-files '*.h' '*.cc' '*.cu' '*.cuh' | xargs clang-format -i
