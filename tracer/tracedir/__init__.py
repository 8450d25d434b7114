"""The trace directory: its tables' schema, its segments, its files' modes."""
