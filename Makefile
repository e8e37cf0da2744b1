# tng: one Makefile for every component. `make help` lists the targets.
#
# On a fresh Debian 12 machine as root, `make demo` and `make test` are each one command: both run `deps` first.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMPS := build/stamps
CARGO ?= cargo
FUZZ_SECONDS ?= 60
# The cargo-fuzz targets `make fuzz` runs, in order (host-agent/fuzz/fuzz_targets/).
FUZZ_TARGETS ?= parse_packet frames ack_ranges handshake operations
# cargo-fuzz build flags for `make fuzz` (run and cmin alike, so cmin reuses the build): no AddressSanitizer (the
# code under test forbids unsafe code; ASan made every target 4-5x slower) and -O, which drops cargo-fuzz's global
# debug assertions; host-agent/fuzz/Cargo.toml turns them and overflow checks back on for the tng crates only.
FUZZ_BUILD ?= --sanitizer none -O
# Targets built without libFuzzer's comparison tracing as well: `operations` decodes its input into a schedule (each
# operation's kind and numbers drawn from ranges), which compared values cannot steer; from an empty corpus it reached
# the same coverage without it in 600 s with 1.5x the executions (docs/transport.md, "Fuzzing").
FUZZ_NO_TRACE_COMPARES ?= operations
# `make soak`: minutes of faults and traffic, and the seed of its fault schedule (docs/soak.md).
SOAK_MINUTES ?= 60
SOAK_SEED ?= 1
# Interleaved rounds of the loopback benchmark (tng, quinn, iperf3); the medians count.
BENCH_ROUNDS ?= 3

# Debian packages the project needs (never the P4 toolchain: see README, "P4 toolchain").
APT_PACKAGES := build-essential pkg-config python3-venv python3-dev libffi-dev \
	iproute2 iputils-ping iperf3 ethtool valgrind tshark tcpdump etcd-server libjemalloc2 nftables
RUST_COMPONENTS := rustfmt clippy

.PHONY: help deps build test bench demo soak lint fmt clean distclean p4 p4-check fuzz lock

help: ## Show this help
	@echo "tng make targets (on a fresh machine run 'make demo' or 'make test'; both install what they need):"
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

deps: $(STAMPS)/apt $(STAMPS)/rust $(STAMPS)/venv ## Install apt packages, Rust components and the Python venv (idempotent)

# tshark's wireshark-common asks whether non-root users may capture; debconf answers no so apt-get never prompts.
$(STAMPS)/apt: Makefile
	@mkdir -p $(STAMPS)
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "deps: installing Debian packages:" $$missing; \
	  if [ "$$(id -u)" != 0 ]; then echo "deps: need root to install $$missing (run as root or install them yourself)"; exit 1; fi; \
	  echo 'wireshark-common wireshark-common/install-setuid boolean false' | debconf-set-selections; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@touch $@

$(STAMPS)/rust: Makefile
	@mkdir -p $(STAMPS)
	@command -v $(CARGO) >/dev/null || { echo "deps: cargo not found; install Rust with rustup (https://rustup.rs)"; exit 1; }
	@if command -v rustup >/dev/null; then rustup component add $(RUST_COMPONENTS) >/dev/null; fi
	@touch $@

$(STAMPS)/venv: requirements.lock pyproject.toml $(STAMPS)/apt
	@mkdir -p $(STAMPS)
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@echo "deps: installing Python packages from requirements.lock into $(VENV)"
	@$(PY) -m pip install -q -r requirements.lock
	@$(PY) -m pip install -q --no-deps -e .
	@touch $@

build: deps ## Build the Rust workspace (release) and compile P4 programs when p4c is present
	$(CARGO) build --workspace --release
	@$(MAKE) --no-print-directory p4

test: deps ## Run every suite (lint, cargo, pytest, P4 checks, PTF on BMv2) and print 'N passed, N failed, N skipped'
	@$(PY) tools/testsuites.py

bench: deps ## Run the benchmarks and write JSON under build/bench/ (loopback vs quinn, simulator and its scale, protocol, agent, ...)
	@mkdir -p build/bench
	$(CARGO) build --release -q -p tng-sim -p tng-agent -p linkem -p tng-bench-quinn
	$(CARGO) build --release -q -p tng-proto --example codec_bench --example idle_memory
	$(CARGO) build --release -q -p tng-agent --example handshake_flood
	$(PY) -m tng_lab.bench_loopback --rounds $(BENCH_ROUNDS) | tee build/bench/loopback.json
	$(CARGO) run --release -q -p tng-sim --bin tng-sim -- bench --json | tee build/bench/sim.json
	$(PY) -m tng_lab.bench_scale | tee build/bench/scale.json
	$(CARGO) run --release -q -p tng-proto --example codec_bench -- --json | tee build/bench/protocol.json
	$(PY) -m tng_lab.bench_agent | tee build/bench/agent.json
	$(PY) -m tng_lab.bench_server_load | tee build/bench/server-load.json
	target/release/linkem bench --json | tee build/bench/linkem.json
	target/release/examples/handshake_flood | tee build/bench/handshake-flood.json
	$(PY) -m tng_controller.bench | tee build/bench/controller.json
	$(PY) -m tng_controller.bench --replicas 3 | tee build/bench/controller-takeover.json
	$(PY) -m tng_lab.bench_lwip | tee build/bench/lwip.json
	$(PY) -m tng_lab.bench_alcc | tee build/bench/alcc.json
	$(PY) -m tng_lab.relay_lab --out build/bench/relay-lab | tee build/bench/relay-lab.json
	$(PY) -m tng_lab.lossy_wan_lab --out build/bench/lossy-wan-lab | tee build/bench/lossy-wan-lab.json

# BMv2 is the LWIP switch when the P4 toolchain is installed (then switch-steered TCP with and without VISIBLE runs
# too); otherwise, or with TNG_LAB_SWITCH=linux, Linux forwarding, and the run says so in one line.
demo: deps ## Run the LTE + Wi-Fi scenario (TCP, MPTCP, tng; with BMv2 switch-steered TCP +- VISIBLE; needs root)
	$(CARGO) build --release -q -p linkem -p tng-agent
	rm -rf build/lab/demo
	$(PY) -m tng_lab run topo/scenarios/lwip.toml --duration 10 --out build/lab/demo

soak: deps ## Fault soak for SOAK_MINUTES (default 60; seed SOAK_SEED): faults, all traffic, invariants -> build/soak/ (root)
	$(CARGO) build --release -q -p linkem -p tng-agent
	rm -rf build/soak/latest
	$(PY) -m tng_lab.soak --minutes $(SOAK_MINUTES) --seed $(SOAK_SEED) --out build/soak/latest

lint: deps ## cargo fmt --check, clippy (warnings denied), ruff check, ruff format --check
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --profile ci -- -D warnings
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

fmt: deps ## Format Rust and Python sources
	$(CARGO) fmt --all
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

p4: deps ## Compile every P4 program into p4src/build/: BMv2 with p4c-bm2-ss, Tofino with p4c-barefoot and bfas (each target skipped with its reason when its compilers are absent)
	@$(PY) -m tng_p4.artifacts compile || [ $$? = 3 ]

p4-check: deps ## Fail if the committed P4 artifacts are stale: source digests always, a fresh compile with each compiler that is here
	@$(PY) -m tng_p4.artifacts check-sources
	@$(PY) -m tng_p4.artifacts check-compile || [ $$? = 3 ]

fuzz: deps ## Run every cargo-fuzz target for FUZZ_SECONDS each (default 60); cumulative executions in build/fuzz/executions.json
	@command -v cargo-fuzz >/dev/null || { echo "fuzz: installing cargo-fuzz"; $(CARGO) install --locked cargo-fuzz; }
	@mkdir -p build/fuzz $(foreach t,$(FUZZ_TARGETS),host-agent/fuzz/corpus/$(t) build/fuzz/corpus/$(t))
	@# The wire format's shared vectors seed the packet parser's corpus (when it is among the targets).
	@case " $(FUZZ_TARGETS) " in *" parse_packet "*) for v in testdata/wire/*.json; do \
	  $(PY) -c 'import json,sys; sys.stdout.buffer.write(bytes.fromhex(json.load(open(sys.argv[1]))["hex"]))' $$v \
	    > build/fuzz/corpus/parse_packet/$$(basename $$v .json); done;; esac
	@# cargo-fuzz needs nightly flags; without a nightly toolchain, let stable accept them.
	@# Each run grows build/fuzz/corpus/<target>; the committed corpus keeps only what adds coverage (cmin).
	@if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then toolchain=+nightly; else toolchain=; export RUSTC_BOOTSTRAP=1; fi; \
	failed=; \
	for target in $(FUZZ_TARGETS); do \
	  flags="$(FUZZ_BUILD)"; case " $(FUZZ_NO_TRACE_COMPARES) " in *" $$target "*) flags="$$flags --no-trace-compares";; esac; \
	  echo "fuzz: $$target for $(FUZZ_SECONDS) s ($$flags)"; start=$$(date +%s); \
	  if ! $(CARGO) $$toolchain fuzz run $$flags --fuzz-dir host-agent/fuzz $$target build/fuzz/corpus/$$target \
	      host-agent/fuzz/corpus/$$target -- -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	      > build/fuzz/$$target.log 2>&1; then \
	    failed="$$failed $$target"; grep -E 'panicked|ERROR|Test unit written' build/fuzz/$$target.log || true; fi; \
	  $(PY) tools/fuzz_executions.py build/fuzz/executions.json $$target build/fuzz/$$target.log \
	    --seconds $$(( $$(date +%s) - start )) || true; \
	  cp -n build/fuzz/corpus/$$target/* host-agent/fuzz/corpus/$$target/ 2>/dev/null || true; \
	  $(CARGO) $$toolchain fuzz cmin $$flags --fuzz-dir host-agent/fuzz $$target host-agent/fuzz/corpus/$$target \
	    > build/fuzz/$$target.cmin.log 2>&1 || echo "fuzz: cmin of $$target failed (build/fuzz/$$target.cmin.log)"; \
	done; \
	cat build/fuzz/executions.json; \
	if [ -n "$$failed" ]; then echo "fuzz: crashes in:$$failed (logs in build/fuzz/, inputs in host-agent/fuzz/artifacts/)"; exit 1; fi

lock: ## Re-resolve requirements.in into requirements.lock (needs network access to PyPI)
	rm -rf build/lock-venv
	$(PYTHON) -m venv build/lock-venv
	build/lock-venv/bin/pip install -q --upgrade pip
	build/lock-venv/bin/pip install -q -r requirements.in
	{ echo "# Generated by 'make lock' from requirements.in (pip freeze of a fresh venv). Do not edit by hand."; \
	  build/lock-venv/bin/pip freeze; } > requirements.lock
	rm -rf build/lock-venv

clean: ## Remove build outputs (target/, build/); keeps the venv
	$(CARGO) clean
	rm -rf build

distclean: clean ## Also remove the Python venv
	rm -rf $(VENV)
