"""Sinks: where each interval's snapshot is written (Parquet segments, ...)."""
