"""A live tracing run: the session, the traced processes and files as /proc shows them,
the host's devices and clocks, and the snapshot of each interval."""
