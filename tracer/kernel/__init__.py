"""The kernel side, seen from Python: libbpf through ctypes, loading and reading the BPF
programs, what the host allows. The only code that needs privileges."""
