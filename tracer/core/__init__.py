"""The pure core: the kernel/user ABI, vocabularies, histogram math, diagnosis. No I/O."""
