#!/usr/bin/env bash
# The prepared GPU check: GPU tests, then the runtime grid on CUDA, then the
# largest N at 1000 x 4; about 6-8 minutes on one H200. Writes logs under ${OUT:-gpu_out}.
#
# On the device machine (CUDA torch, no POT): carry POT's wheel in .whl (see the device
# tool's notes) and name .whl in `carry`; this script installs it to /tmp/site first.
# The wheel for its Python 3.12 (33 MB; tried from this project's CPU machine):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 -d .whl pot==0.9.7.post1
# Without it, the grid leaves out its POT column and the test modules that import POT
# fail to collect; the others still run (--continue-on-collection-errors).
# Each step has its own time limit, so that one hang cannot eat the whole budget.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
python3 - <<'PY' 2>&1 | tee "$OUT/env.txt"
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0))
try:
    import ot; print("POT", ot.__version__)
except ImportError:
    print("POT missing: the POT columns and POT-based tests are skipped")
PY
status=0
# 1. the GPU tests and every device-parametrised test on CUDA (CPU twins skipped)
timeout 200 python3 -m pytest tests/test_gpu.py -q -p no:cacheprovider --device cuda \
  2>&1 | tee "$OUT/test_gpu.txt" || status=1
timeout 150 python3 -m pytest tests -q -p no:cacheprovider --device cuda -k cuda \
  --continue-on-collection-errors --ignore=tests/test_notebooks.py --ignore=tests/test_benchmarks.py \
  --ignore=tests/test_distributed.py 2>&1 | tee "$OUT/test_device.txt" || status=1
# 2. the runtime on CUDA: the reference cell, an N sweep to 1e5, and the grid
#    d in {2, 64, 784, 3072} x N in {500, 2000, 1e4, 5e4} (ratios side by side in one run)
timeout 60 python3 -m benchmarks.runtime --device cuda --rounds 7 --out "$OUT/runtime" \
  2>&1 | tee "$OUT/runtime_ref.txt" || status=1
timeout 90 python3 -m benchmarks.runtime --device cuda --sweep n --grid 2000,10000,50000,100000 \
  --rounds 5 --out "$OUT/runtime_n" 2>&1 | tee "$OUT/runtime_n.txt" || status=1
timeout 120 python3 -m benchmarks.runtime --device cuda --sweep grid --rounds 5 \
  --max-rounds-s 20 --out "$OUT/runtime_grid" 2>&1 | tee "$OUT/runtime_grid.txt" || status=1
# 3. the largest N at d = 128, 1000 x 4 (doubling until out of memory or 60 s of runs)
timeout 150 python3 -m benchmarks.largest --device cuda --start 100000 --budget-s 60 \
  2>&1 | tee "$OUT/largest.txt" || status=1
exit $status
