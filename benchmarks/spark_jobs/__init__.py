"""PySpark scripts the benchmarks submit themselves; they run on the Spark runtime's Python."""
