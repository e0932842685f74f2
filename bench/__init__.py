"""Benchmarks of spark_recoverable_sink: ``python bench/run.py [--quick]``, then ``python bench/render.py``.

See docs/PERFORMANCE.md (rendered from ``bench/results/latest.json``).
"""
