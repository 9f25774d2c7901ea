"""``make bench``: how much airflow-iceberg costs on top of plain Spark, measured side by side.

Run it with ``python -m benchmarks.run`` from the checkout (``make bench`` does). Every
comparison interleaves its two sides (A, B, A, B, ...) in the same run, so load from other
processes hits both; medians and their ratio are reported, targets are printed as PASS or MISS.
"""
