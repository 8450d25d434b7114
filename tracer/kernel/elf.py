"""Which source file each program of a linked BPF object came from, read from its ELF symbols.

The stages of bpf/ (proc, syscall, pagecache, block, sched) are linked into one object; the
self-cost tables still name a program by its stage ("proc/fork_btf"). The static linker keeps
each input's STT_FILE symbol, followed by that input's symbols, so a function's file is the
last STT_FILE before it.
"""

from __future__ import annotations

import struct
from pathlib import Path

_EHDR = struct.Struct("<16x2HI3QI6H")  # ELF64 header, little-endian (BPF objects are)
_SHDR = struct.Struct("<2I4Q2I2Q")
_SYM = struct.Struct("<IBBHQQ")
SHT_SYMTAB, STT_FUNC, STT_FILE, STB_GLOBAL = 2, 2, 4, 1


def function_files(path: Path) -> dict[str, str]:
    """{global function name: the source file it was compiled from} of an ELF object."""
    raw = path.read_bytes()
    shoff, shentsize, shnum = (_EHDR.unpack_from(raw)[i] for i in (5, 10, 11))
    sections = [_SHDR.unpack_from(raw, shoff + i * shentsize) for i in range(shnum)]
    out: dict[str, str] = {}
    for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
        if sh_type != SHT_SYMTAB:
            continue
        strtab = sections[link]
        names = raw[strtab[4]:strtab[4] + strtab[5]]
        current = ""
        for i in range(offset, offset + size, entsize):
            name_off, info, *_ = _SYM.unpack_from(raw, i)
            name = names[name_off:names.index(b"\0", name_off)].decode()
            if info & 0xF == STT_FILE:
                current = name
            elif info & 0xF == STT_FUNC and info >> 4 == STB_GLOBAL:
                out[name] = current
    return out
