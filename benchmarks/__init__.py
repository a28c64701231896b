"""Benchmarks of tsw: runtime against POT and the sort-bound lower limit, gradient flows.

Run as modules, e.g. ``python -m benchmarks.runtime`` or ``python -m benchmarks.gradient_flow``.
"""

import os

# Every benchmark times the compiled path from its first call: the kernels compile (or load
# from the disk cache) before it, instead of in the background while the torch operators
# serve. benchmarks.first_call sets the variable for each of its processes itself.
os.environ.setdefault("TSW_NUMBA", "wait")
