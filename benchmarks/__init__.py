"""Benchmarks of tsw: runtime against POT and the sort-bound lower limit, gradient flows.

Run as modules, e.g. ``python -m benchmarks.runtime`` or ``python -m benchmarks.gradient_flow``.
"""
