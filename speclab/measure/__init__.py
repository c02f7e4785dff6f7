"""Measurement: prompt sets (workloads), costs (profiling), side-by-side speed (bench), and acceptance
tables with the bundled pair's model card (card)."""
