# libdcp inside Megatron-Core, and the torch ops: the Python tests that need torch and
# megatron-core (test-only packages from PyPI, each release in its own virtual environment).
# Not in make test (torch is a 5 GB install); CI runs make test-megatron after it.
#
# `make test-megatron` tests every release of libdcp.megatron.RELEASES, each in its own virtual
# environment with its pinned test-only packages (installed from PyPI once, reused while the list
# is unchanged): megatron-core 0.16.1 (python/tests/megatron-requirements.txt,
# build/venv-megatron, $(PYTHON3)) and 0.19.2 (python/tests/megatron-0.19-requirements.txt,
# build/venv-megatron-0.19, Python 3.12: PYTHON312 or found by python/tests/find_python.sh, which
# fails saying where it looked). Under each: python/tests/megatron_core_test.py (Megatron's own
# data-loader wrapper and hybrid-CP schedule on 4 and 8 gloo ranks with its scheduler and
# libdcp's, bad input, real collectives through the schedule at 8 and 16 ranks) and
# python/tests/megatron_contract_test.py (the contract fuzzer and the step property against
# Megatron's scheduler). Once, with the first release's Python: python/tests/torch_package_test.py
# (the per-token loss example, `pip install ./python` and `pip wheel ./python` in fresh
# environments) and python/tests/ring_attention_test.py (python/examples/ring_attention.py's
# torch.distributed ring over libdcp views at 2 and 4 gloo ranks against attention without CP);
# where nvcc's headers are, first the torch ops on the model (test-torch-cpu). Prints its time.
# MEGATRON_VENV / MEGATRON_NEXT_VENV point at existing environments. `make bench-megatron-core`
# runs bench/megatron_core_compare.py under both releases (bench/RESULTS.md).
MEGATRON_VENV := $(BUILD)/venv-megatron
MEGATRON_REQUIREMENTS := python/tests/megatron-requirements.txt
MEGATRON_PYTHON := $(MEGATRON_VENV)/bin/python
MEGATRON_NEXT_VENV := $(BUILD)/venv-megatron-0.19
MEGATRON_NEXT_REQUIREMENTS := python/tests/megatron-0.19-requirements.txt
MEGATRON_NEXT_PYTHON := $(MEGATRON_NEXT_VENV)/bin/python
MEGATRON_RELEASE_TESTS := megatron_core_test.py megatron_contract_test.py
.PHONY: test-megatron bench-megatron-core
$(MEGATRON_VENV)/installed: $(MEGATRON_REQUIREMENTS) | $(BUILD)
	rm -rf $(MEGATRON_VENV)
	$(PYTHON3) -m venv $(MEGATRON_VENV)
	$(MEGATRON_PYTHON) -m pip install -q -r $(MEGATRON_REQUIREMENTS)
	touch $@
$(MEGATRON_NEXT_VENV)/installed: $(MEGATRON_NEXT_REQUIREMENTS) | $(BUILD)
	rm -rf $(MEGATRON_NEXT_VENV)
	python312="$${PYTHON312:-$$(sh python/tests/find_python.sh 3.12)}" && \
	    "$$python312" -m venv $(MEGATRON_NEXT_VENV)
	$(MEGATRON_NEXT_PYTHON) -m pip install -q -r $(MEGATRON_NEXT_REQUIREMENTS)
	touch $@
test-megatron: $(MEGATRON_VENV)/installed $(MEGATRON_NEXT_VENV)/installed $(BUILD)/libdcp.so \
               $(BUILD)/dcp-plan
	@start=$$(date +%s); status=0; \
	for python in $(MEGATRON_PYTHON) $(MEGATRON_NEXT_PYTHON); do \
	    echo "test-megatron: $$($$python -c 'from importlib import metadata; print("megatron-core", metadata.version("megatron-core"))')"; \
	    DCP_LIBRARY=$(abspath $(BUILD)/libdcp.so) PYTHONWARNINGS=ignore \
	        $$python -B python/tests/run.py $(MEGATRON_RELEASE_TESTS) || status=1; \
	done; \
	DCP_LIBRARY=$(abspath $(BUILD)/libdcp.so) PYTHONWARNINGS=ignore \
	    $(MEGATRON_PYTHON) -B python/tests/run.py torch_package_test.py ring_attention_test.py || \
	    status=1; \
	echo "test-megatron: $$(( $$(date +%s) - start )) s"; exit $$status
bench-megatron-core: $(MEGATRON_VENV)/installed $(MEGATRON_NEXT_VENV)/installed $(BUILD)/libdcp.so \
                     $(BUILD)/plan_bench
	mkdir -p $(BUILD)/bench-lengths
	$(BUILD)/plan_bench --dump-lengths $(BUILD)/bench-lengths
	status=0; for python in $(MEGATRON_PYTHON) $(MEGATRON_NEXT_PYTHON); do \
	    DCP_LIBRARY=$(abspath $(BUILD)/libdcp.so) PYTHONWARNINGS=ignore \
	        $$python bench/megatron_core_compare.py --lengths-dir $(BUILD)/bench-lengths \
	        || status=1; \
	done; exit $$status

# python/tests/test_ops.py and python/examples/train_tiny.py (through test_ops) on
# build/libdcp_cuda-cpu.so (mk/cpu_model.mk) with the torch of build/venv-megatron.
.PHONY: test-torch-cpu
test-torch-cpu: $(MEGATRON_VENV)/installed $(BUILD)/libdcp_cuda-cpu.so $(BUILD)/libdcp.so
	sh tests/test_torch_cpu.sh $(MEGATRON_PYTHON)
ifeq ($(HAVE_NVCC),yes) # the toolkit's headers
test-megatron: test-torch-cpu
endif
