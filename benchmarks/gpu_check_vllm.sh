#!/usr/bin/env bash
# GPU check of the vllm engine (prepared for a CUDA machine with vLLM installed; installing
# vLLM is the user's job: `pip install beacon-vr[vllm]`). Run from the repository root:
#
#   bash benchmarks/gpu_check_vllm.sh [--arch qwen2_vl --arch qwen2_5_vl] [--dtype float32]
#
# 1. prints the environment; 2. builds the tiny model, runs the same prompts through the hf
# (cuda) and vllm engines at temperature 0 and compares ids and log-probs; 3. zeroes every weight
# through update_weights and checks the log-probs become uniform; 4. prints timings;
# 5. runs tests/engines/test_vllm.py.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
export VLLM_LOGGING_LEVEL="${VLLM_LOGGING_LEVEL:-WARNING}"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv || true
"$PYTHON" benchmarks/gpu_check_vllm.py "$@"
check=$?
"$PYTHON" -m pytest -q -p no:cacheprovider -o addopts="" tests/engines/test_vllm.py -rs
tests=$?
echo "gpu_check_vllm: script exit $check, tests exit $tests"
exit $(( check || tests ))
