"""Reading nvcc's cubins (ELF64): a digest of the code one kernel of a module runs.

Two builds of a kernel file under different -D sets often give one kernel the very same code:
a macro that only another kernel reads. The tuner measures such a parameter set once
(``CudaBackend.built_signature``). The whole cubin is no key for that: its symbol table, frame
info and module attributes hold every kernel's sizes, so they differ whenever any kernel does.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

#: sections that describe every kernel of the module together (their bytes change with any kernel's
#: size): left out of a kernel's digest. The module attribute table (.nv.info) is read record by record.
_MODULE_WIDE = frozenset({
    ".shstrtab", ".strtab", ".symtab", ".debug_frame", ".rela.debug_frame", ".rel.debug_frame",
    ".nv.callgraph", ".nv.prototype", ".nv.info",
})
_SHT_NOBITS, _SHT_RELA, _SHT_REL = 8, 4, 9
# .nv.info record formats (EIFMT_*): NVAL (no value), BVAL (a byte), HVAL (two bytes), SVAL (sized)
_EIFMT_FIXED, _EIFMT_SVAL = (0x01, 0x02, 0x03), 0x04


@dataclass(frozen=True)
class _Section:
    name: str
    type: int
    flags: int
    info: int
    align: int
    entsize: int
    body: bytes


def _sections(cubin: bytes) -> list[_Section]:
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        raise ValueError("not a little-endian ELF64 cubin")
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    out = []
    for name, typ, flags, _addr, offset, size, _link, info, align, entsize in headers:
        end = cubin.index(b"\0", names_at + name)
        # a NOBITS section (shared memory) has no bytes in the file: its size is what it reserves
        body = size.to_bytes(8, "little") if typ == _SHT_NOBITS else cubin[offset:offset + size]
        out.append(_Section(cubin[names_at + name:end].decode(), typ, flags, info, align, entsize, body))
    return out


def _symbols(sections: list[_Section]) -> list[str]:
    """Each symbol's name by index (a section's own name for section symbols)."""
    symtab = next((s for s in sections if s.name == ".symtab"), None)
    strtab = next((s for s in sections if s.name == ".strtab"), None)
    if symtab is None or strtab is None:
        return []
    names = []
    for i in range(len(symtab.body) // 24):
        st_name, st_info, _other, shndx, _value, _size = struct.unpack_from("<IBBHQQ", symtab.body, 24 * i)
        if st_info & 0xF == 3 and 0 < shndx < len(sections):  # STT_SECTION
            names.append(sections[shndx].name)
        else:
            names.append(strtab.body[st_name:strtab.body.index(b"\0", st_name)].decode())
    return names


def kernels(cubin: bytes) -> list[str]:
    """The kernels (entry points: a code section and a parameter bank each) of ``cubin``."""
    return _kernels_in(_sections(cubin))


def _kernels_in(sections: list[_Section]) -> list[str]:
    names = {s.name for s in sections}
    return sorted(n[len(".text."):] for n in names
                  if n.startswith(".text.") and f".nv.constant0.{n[len('.text.'):]}" in names)


def kernel_digest(cubin: bytes, kernel: str) -> str:
    """A digest of what a launch of ``kernel`` runs from ``cubin``: its code, parameter bank, shared
    memory and attribute sections (headers and bytes, registers included), its relocations with
    symbol names for indices, the module attribute records that name it, and every section that
    belongs to no other kernel (device functions, module constants). Equal digests: the same
    kernel; the digest leaves out only what describes the module's other kernels.

    Raises ValueError where ``cubin`` is no ELF64 cubin or has no kernel ``kernel``.
    """
    sections = _sections(cubin)
    entries = _kernels_in(sections)
    if kernel not in entries:
        raise ValueError(f"the cubin has no kernel {kernel!r} (it has {len(entries)})")
    others = [f".{e}" for e in entries if e != kernel]
    symbols = _symbols(sections)
    h = hashlib.sha256(struct.pack("<I", struct.unpack_from("<I", cubin, 0x30)[0]))  # e_flags: the arch
    for s in sections:
        if s.name in _MODULE_WIDE or any(s.name.endswith(o) for o in others):
            continue
        # section and symbol indices move with the module's other kernels: left out. A code
        # section's sh_info holds its register count in the top byte (its symbol below).
        info = s.info >> 24 if s.name.startswith(".text.") else 0
        h.update(repr((s.name, s.type, s.flags, info, s.align, s.entsize, len(s.body))).encode())
        if s.type in (_SHT_RELA, _SHT_REL) and symbols:
            step = 24 if s.type == _SHT_RELA else 16
            for at in range(0, len(s.body) - step + 1, step):
                offset, rinfo = struct.unpack_from("<QQ", s.body, at)
                addend = struct.unpack_from("<q", s.body, at + 16)[0] if step == 24 else 0
                sym = rinfo >> 32
                h.update(repr((offset, rinfo & 0xFFFFFFFF, addend,
                               symbols[sym] if sym < len(symbols) else sym)).encode())
        else:
            h.update(s.body)
    index = symbols.index(kernel) if kernel in symbols else -1
    for s in sections:
        if s.name == ".nv.info":
            h.update(_records_naming(s.body, index))
    return h.hexdigest()


def _records_naming(table: bytes, symbol: int) -> bytes:
    """The module attribute records (EIATTR) whose value starts with ``symbol``'s index (register
    count, stack and frame sizes of that kernel), the index dropped; the whole table where a record
    cannot be read."""
    out = bytearray()
    at = 0
    while at + 4 <= len(table):
        fmt, attr = table[at], table[at + 1]
        if fmt == _EIFMT_SVAL:
            (size,) = struct.unpack_from("<H", table, at + 2)
            value = table[at + 4:at + 4 + size]
            if size >= 4 and struct.unpack_from("<I", value)[0] == symbol:
                out += bytes([attr]) + value[4:]
            at += 4 + size
        elif fmt in _EIFMT_FIXED:
            at += 4
        else:  # an unknown format: keep everything rather than guess
            return table
    return bytes(out)
