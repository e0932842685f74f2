"""The benchmark of spark_recoverable_sink: ``python bench/run.py [--quick]``, then ``python bench/render.py``.

docs/PERFORMANCE.md is rendered from one results file in bench/results/.
"""
