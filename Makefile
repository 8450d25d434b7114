# iotrace: `make run` sets up this machine and runs the demo; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
ARCH := $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
# Every stage of bpf/ is compiled alone, then linked into the one object the loader opens.
# The order of the link: the definitions of the shared maps first, then syscall.bpf.c before
# the other stages that call kfuncs, since it declares them (bpf/core_fixes.bpf.h).
BPF_STAGES := maps proc syscall pagecache block sched memory cuda
BPF_SRC := $(patsubst %,bpf/%.bpf.c,$(BPF_STAGES))
BPF_PARTS := $(patsubst bpf/%.bpf.c,build/bpf/%.bpf.o,$(BPF_SRC))
BPF_OBJ := tracer/bpf/iotrace.bpf.o
# The ABI's layouts for user space, generated from the linked object's BTF (committed: the wheel
# and `make unit` need it without a build; tests/test_abi.py checks that it is the object's).
ABI_LAYOUT := tracer/core/abi_layout.py
WORKLOADS := tests/workloads/bin/iowork scripts/bin/pread_loop scripts/bin/open_read_loop \
	scripts/bin/bench_floor.bpf.o
# fuse3: libfuse3 and fusermount3, with which the FUSE test's server (mfusepy) mounts
APT_PKGS := clang llvm libbpf-dev libbpf1 bpftool make gcc libc6-dev python3-venv tmux util-linux fuse3 \
	chromium-headless-shell
# promtool, which the tests run on /metrics and the dashboard's queries, comes with Debian's
# prometheus package; without its recommends (node-exporter), as nothing of it is run.
APT_PKGS_ALONE := prometheus
NEED_CMDS := clang bpftool cc tmux chromium-headless-shell promtool fusermount3

.PHONY: run test unit build deps venv clean lint container

run: build venv
	$(VENV)/bin/iotrace demo

# The unit tests: every test not marked `kernel`, which needs no root, no BPF, no capabilities.
# Run as root, they run with every capability dropped (setpriv), as they would as any other
# user: a test that needs privileges and is not marked `kernel` fails here.
DROP_CAPS := $(if $(filter 0,$(shell id -u)),setpriv --inh-caps=-all --bounding-set=-all)
# pytest exits 5 when it collected no test: that is a failure of the suite here, said clearly.
PYTEST = rc=0; $(1) $(PY) -m pytest -q -ra -m $(2) tests || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests"; fi

# Every test: the unit tests as `make unit` runs them, then the `kernel` ones (as root); it fails
# when either run fails.
test: build venv $(WORKLOADS)
	@$(call PYTEST,$(DROP_CAPS),"not kernel"); unit=$$rc; \
	$(call PYTEST,,kernel); [ $$unit -ne 0 ] && exit $$unit; exit $$rc

unit: venv
	@$(call PYTEST,$(DROP_CAPS),"not kernel"); exit $$rc

build: deps $(BPF_OBJ) $(ABI_LAYOUT)

# System packages, installed only when something is missing (Debian/Ubuntu, as root).
deps:
	@missing=""; for c in $(NEED_CMDS); do command -v $$c >/dev/null || missing=1; done; \
	[ -e /usr/include/bpf/bpf_helpers.h ] || missing=1; \
	if [ -n "$$missing" ]; then \
		echo "installing system packages: $(APT_PKGS) $(APT_PKGS_ALONE)"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(APT_PKGS) && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
			$(APT_PKGS_ALONE); \
	fi

build/vmlinux.h:
	@mkdir -p build
	@[ -r /sys/kernel/btf/vmlinux ] || { echo "error: /sys/kernel/btf/vmlinux is missing: this kernel has no BTF (CONFIG_DEBUG_INFO_BTF=y is needed)"; exit 1; }
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > $@.tmp && mv $@.tmp $@

build/bpf/%.bpf.o: bpf/%.bpf.c bpf/*.h build/vmlinux.h
	@mkdir -p build/bpf
	clang -g -O2 -Wall -target bpf -mcpu=v3 -D__TARGET_ARCH_$(ARCH) -Ibuild -Ibpf -c $< -o $@

# libbpf's static linker resolves each stage's extern maps to maps.bpf.c's definitions.
$(BPF_OBJ): $(BPF_PARTS)
	@mkdir -p tracer/bpf
	bpftool gen object $@.tmp $^ && mv $@.tmp $@

$(ABI_LAYOUT): $(BPF_OBJ) scripts/abi_layout.py
	$(PYTHON) scripts/abi_layout.py $(BPF_OBJ) > $@.tmp && mv $@.tmp $@

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

tests/workloads/bin/iowork: tests/workloads/iowork.c
	@mkdir -p $(dir $@)
	cc -O2 -static -Wall -Wextra -o $@ $<

scripts/bin/pread_loop: scripts/pread_loop.c
	@mkdir -p $(dir $@)
	cc -O2 -static -Wall -Wextra -o $@ $<

scripts/bin/open_read_loop: scripts/open_read_loop.c
	@mkdir -p $(dir $@)
	cc -O2 -static -Wall -Wextra -o $@ $<

scripts/bin/bench_floor.bpf.o: scripts/bench_floor.bpf.c bpf/*.h build/vmlinux.h
	@mkdir -p $(dir $@)
	clang -g -O2 -Wall -target bpf -mcpu=v3 -D__TARGET_ARCH_$(ARCH) -Ibuild -Ibpf -c $< -o $@

# The image of Dockerfile.privileged, with podman, from a base made of Debian's packages (no image
# registry needed): tests/test_kernel_container.py then runs it. Not a step of `make test`: on a
# fresh machine the tools and a first build add about 4 minutes (docs/container.md).
CONTAINER_PKGS := podman runc mmdebstrap
container:
	@for c in $(CONTAINER_PKGS); do command -v $$c >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(CONTAINER_PKGS); \
	fi
	scripts/container-image.sh

lint: venv
	$(VENV)/bin/ruff check tracer tests scripts

clean:
	rm -rf build tracer/bpf/*.bpf.o tests/workloads/bin scripts/bin
