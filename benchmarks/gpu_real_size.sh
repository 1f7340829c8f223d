#!/usr/bin/env bash
# benchmarks/gpu_real_size.py on a CUDA machine that cannot reach PyPI, run from the repository
# root. The device image's Python has torch (CUDA), transformers, accelerate, peft, aiohttp,
# numpy, Pillow, OpenCV and matplotlib, but not the rest of Beacon's dependencies below.
#
#   bash benchmarks/gpu_real_size.sh --fetch-wheels      # here, with PyPI: into .gpu-wheels/
#   bash benchmarks/gpu_real_size.sh --out "$OUT/table.md" [--budget-s 450]   # there
#
# There, the wheels in .gpu-wheels/ (carry that folder, ~4 MB) are installed without their
# dependencies, Beacon runs from src/ (PYTHONPATH), and every argument goes to the script.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"
WHEELS=(
    isal==1.9.1 pyseccomp==0.1.2 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0
    typing-inspection==0.4.5 typing_extensions==4.16.0 fastapi==0.165.0 starlette==1.10.0
    uvicorn==0.55.0 h11==0.16.0 math-verify==0.9.0 latex2sympy2_extended==1.11.0
    antlr4-python3-runtime==4.13.2
)
if [ "${1:-}" = "--fetch-wheels" ]; then
    exec "$PYTHON" -m pip download -q -d .gpu-wheels --no-deps --only-binary :all: \
        --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
        "${WHEELS[@]}"
fi
if [ -d .gpu-wheels ]; then
    "$PYTHON" -m pip install -q --no-index --no-deps .gpu-wheels/*.whl || exit 1
fi
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv || true
exec "$PYTHON" benchmarks/gpu_real_size.py "$@"
