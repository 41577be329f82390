# What a user runs: the CLI, the C library for Python (and any FFI), the examples' programs, the
# planner bench, and dcp.h itself, written from its domain sources in src/.

LIBRARY_PARTS := $(BUILD)/dcp-plan $(BUILD)/libdcp.so
EXAMPLES := $(BUILD)/loader
BENCHES := $(BUILD)/plan_bench

$(BUILD)/dcp-plan: examples/dcp_plan.c dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) $< -o $@ -lm

# dcp.h's implementation compiled once (bench/dcp_impl.c): the libraries, the CPU execution
# model and the tests of the public API link it (mk/tests.mk), each include of dcp.h costing
# 0.01 s where the implementation costs seconds.
$(BUILD)/dcp_impl-pic.o: bench/dcp_impl.c dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) -fPIC -c $< -o $@

# The Python package's library (CPU: planner, views, reroute, references).
$(BUILD)/libdcp.so: $(BUILD)/dcp_impl-pic.o | $(BUILD)
	$(CC) -shared $< -o $@ -lm

# The data-loader example (tests/test_loader.sh runs it).
$(BUILD)/loader: examples/loader.c dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) $< -o $@ -lm

# Its length shapes are test_plan_guarantee's too.
$(BUILD)/plan_bench: bench/plan_bench.c bench/length_shapes.h dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) $< -o $@ -lm

# dcp.h is generated from src/ (tools/amalgamate.py; tests/test_amalgamation.sh fails while it
# is stale). Written on request only, so that a clone builds without Python.
.PHONY: amalgamate
amalgamate:
	$(PYTHON3) tools/amalgamate.py

.PHONY: demo bench bench-megatron
demo: $(BUILD)/dcp-plan
	$(BUILD)/dcp-plan --lognormal 4096,1.1,1024,8192,256 --seed 1 --ranks 16 \
	    --max-tokens-per-rank 4096 --svg $(BUILD)/demo.svg
	@echo "timeline written to $(BUILD)/demo.svg"

bench: $(BUILD)/plan_bench
	$(BUILD)/plan_bench

# Megatron-LM's dynamic-CP scheduler (reimplemented in Python, standard library only) against
# ours on plan_bench's batches and on pools that are not a power of two, both plans evaluated
# by dcp_plan_simulate under E = D (not in make test).
bench-megatron: $(BUILD)/plan_bench
	mkdir -p $(BUILD)/bench-lengths
	$(BUILD)/plan_bench --dump-lengths $(BUILD)/bench-lengths
	$(PYTHON3) bench/megatron_baseline.py $(BUILD)/bench-lengths
	$(BUILD)/plan_bench --megatron $(BUILD)/bench-lengths
