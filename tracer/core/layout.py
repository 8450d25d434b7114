"""Struct formats, numpy fields and enum names built from the ABI's generated layouts
(`abi_layout`, from the BPF object's BTF), so that `abi` writes no size, offset or value of
bpf/iotrace.h itself."""

from __future__ import annotations

from collections.abc import Collection

from tracer.core.abi_layout import ENUMS, STRUCTS

_STRUCT_CODES = {"u8": "B", "u16": "H", "u32": "I", "u64": "Q", "s8": "b", "s16": "h", "s32": "i",
                 "s64": "q"}


def size(struct: str) -> int:
    """sizeof(struct `struct`)."""
    return STRUCTS[struct][0]


def offset(struct: str, field: str) -> int:
    """offsetof(struct `struct`, `field`)."""
    for name, off, _, _ in STRUCTS[struct][1]:
        if name == field:
            return off
    raise KeyError(f"struct {struct} has no field {field}")


def enum_value(enum: str, member: str) -> int:
    return ENUMS[enum][member]


def limit(member: str) -> int:
    """A size of enum iot_limits (IOT_MAX_SLOTS, IOT_COMM_LEN, ...)."""
    return ENUMS["iot_limits"][member]


def enum_names(enum: str, prefix: str) -> dict[int, str | None]:
    """value -> name of the members of `enum` named `prefix`NAME, in lower case, by value; a
    member named `prefix`NONE maps to None (no such thing for that row)."""
    out = {}
    for member, value in sorted(ENUMS[enum].items(), key=lambda kv: kv[1]):
        if member.startswith(prefix):
            name = member[len(prefix):].lower()
            out[value] = None if name == "none" else name
    return out


def _array(ty: str) -> tuple[str, int]:
    """("u64", 40) of "u64[40]"; (ty, 0) of a type that is not an array."""
    if not ty.endswith("]"):
        return ty, 0
    base, n = ty[:-1].split("[")
    return base, int(n)


def _codes(struct: str, whole: Collection[str], stop: str | None) -> tuple[str, int]:
    """The format codes of `struct`'s fields (before `stop`), and where they end."""
    codes, pos = [], 0
    for field, off, n, ty in STRUCTS[struct][1]:
        if field == stop:
            return "".join(codes), pos
        if off > pos:  # the compiler's padding
            codes.append(f"{off - pos}x")
        base, count = _array(ty)
        if field.startswith("pad"):
            codes.append(f"{n}x")
        elif base.startswith("struct ") and not count:
            codes.append(f"{n}s" if field in whole else _codes(base[7:], (), None)[0])
        elif base == "char":
            codes.append(f"{count}s")
        else:
            codes.append(f"{count or ''}{_STRUCT_CODES[base]}")
        pos = off + n
    if stop is not None:
        raise KeyError(f"struct {struct} has no field {stop}")
    end = size(struct)
    return "".join(codes) + (f"{end - pos}x" if end > pos else ""), end


def struct_format(struct: str, whole: Collection[str] = (), stop: str | None = None) -> str:
    """The `struct` module's format of C struct `struct`, little-endian, with every byte
    accounted for: a value per scalar and per element of an array of scalars, bytes for a char
    array, padding for the fields named pad* and the compiler's, the fields of a nested struct
    in its place (or its bytes, for the fields named in `whole`); with `stop`, the fields before
    that one only (a record whose tail is sent in part)."""
    return "<" + _codes(struct, whole, stop)[0]


_NUMPY_CODES = {"u8": "u1", "s8": "i1", "u16": "<u2", "s16": "<i2", "u32": "<u4", "s32": "<i4",
                "u64": "<u8", "s64": "<i8"}


def numpy_fields(struct: str) -> tuple[tuple[str, str], ...]:
    """(name, numpy type) of each field of a struct of scalars, its pad* fields as "_pad"."""
    out = []
    for field, _, n, ty in STRUCTS[struct][1]:
        out.append(("_pad", f"V{n}") if field.startswith("pad") else (field, _NUMPY_CODES[ty]))
    return tuple(out)
