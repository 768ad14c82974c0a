"""Makes llama-cpp-py-sync's prebuilt llama.cpp libraries load on a glibc older than 2.38
(Debian 12 has 2.36). Run by `.ci/llm-venv`; does nothing on a newer glibc.

The wheel is tagged manylinux2014 but its libraries ask for `GLIBC_2.38` for four
functions only: the C23 spellings of `strtol`, `strtoul`, `strtoull` and `sscanf` (they
differ from the old ones in accepting a `0b` prefix, which llama.cpp does not parse). So:

1. `libisoc23.so` is built from `isoc23.c` (beside this file), defining the four under
   their C23 names by calling the old ones; `serve.py` loads it first, into the global
   scope, so the libraries' references find it.
2. Each library's requirement of the version `GLIBC_2.38` is marked weak
   (`VER_FLG_WEAK` in its `.gnu.version_r`), so the loader no longer refuses a libc
   without it. Nothing else in the files changes.

    python glibc_compat.py PACKAGE_DIR
"""

import os
import struct
import subprocess
import sys

VER_FLG_WEAK = 0x2
SHT_GNU_VERNEED = 0x6FFFFFFE
WANTED = b"GLIBC_2.38"


def glibc_version():
    v = os.confstr("CS_GNU_LIBC_VERSION") or "glibc 99.0"
    major, minor = v.split()[1].split(".")[:2]
    return int(major), int(minor)


def weaken(path):
    """Marks the file's GLIBC_2.38 requirement weak; returns whether it had one."""
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            return False  # not a little-endian ELF64
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        sections = [
            struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)
        ]
        changed = False
        for (_, sh_type, _, _, off, _, link, info, _, _) in sections:
            if sh_type != SHT_GNU_VERNEED:
                continue
            strtab = sections[link][4]
            pos = off
            for _ in range(info):
                _, _, _, vn_aux, vn_next = struct.unpack_from("<HHIII", data, pos)
                cnt, = struct.unpack_from("<H", data, pos + 2)
                aux = pos + vn_aux
                for _ in range(cnt):
                    _, flags, _, name, next_aux = struct.unpack_from("<IHHII", data, aux)
                    start = strtab + name
                    if bytes(data[start:start + len(WANTED) + 1]) == WANTED + b"\0":
                        struct.pack_into("<H", data, aux + 4, flags | VER_FLG_WEAK)
                        changed = True
                    if next_aux == 0:
                        break
                    aux += next_aux
                if vn_next == 0:
                    break
                pos += vn_next
        if changed:
            f.seek(0)
            f.write(data)
        return changed


def main():
    package = sys.argv[1]
    if glibc_version() >= (2, 38):
        print("glibc has 2.38: nothing to do")
        return
    here = os.path.dirname(os.path.abspath(__file__))
    shim = os.path.join(package, "libisoc23.so")
    subprocess.check_call(
        ["gcc", "-O2", "-shared", "-fPIC", "-o", shim, os.path.join(here, "isoc23.c")]
    )
    for name in sorted(os.listdir(package)):
        if ".so" in name and name != "libisoc23.so":
            if weaken(os.path.join(package, name)):
                print(f"{name}: GLIBC_2.38 made weak")


if __name__ == "__main__":
    main()
