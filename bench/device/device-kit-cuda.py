#!/usr/bin/env python3
"""Makes node-llama-cpp's prebuilt libggml-cuda.so usable on an H200 with driver 580 (CUDA 13.0),
for the device kit (bench/device/device-kit.sh).

The prebuilt (node-llama-cpp 3.21.1, llama.cpp v0.4.0 build) was compiled by CUDA 13.1: its
.nv_fatbin holds, per translation unit, SASS for sm_86/89/120/121 and zstd-compressed PTX for
compute_75/80/90 at PTX ISA 9.1. An sm_90 GPU has no SASS to run, and driver 580 JIT-compiles PTX
only up to ISA 9.0 (CUDA 13.0): every kernel launch would fail ("the provided PTX was compiled with
an unsupported toolchain"). This rewrites each fatbin in place to its compute_90 PTX alone, with
`.version 9.1` made `.version 9.0` (the entry header's version too), recompressed with zstd the way
nvcc 13.0 writes it (content size, single segment, no checksum). Each fatbin keeps its offset, so
the pointers to it stay valid; the bytes freed are zeroed (xz then squeezes them away).

  python3 bench/device/device-kit-cuda.py IN.so OUT.so [--ptx-dir DIR]   (DIR: the patched PTX, one file per fatbin)
  python3 bench/device/device-kit-cuda.py --check OUT.so                  (re-parse and check every fatbin)

Needs the `zstd` command. The driver JIT-compiles the PTX for sm_90 on first use of each module
(lazily, cached in CUDA_CACHE_PATH).
"""
import os
import struct
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

FATBIN_MAGIC = 0xBA55ED50
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
KIND_PTX = 1
TARGET_ARCH = 90
ZSTD_ARGS = ["-19", "--zstd=wlog=24", "--no-check", "-q"]  # wlog 24 (16 MiB) > the largest module: single-segment frames


def nv_fatbin(d):
    shoff, = struct.unpack_from("<Q", d, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize) for i in range(shnum)]
    stroff = secs[shstrndx][4]
    for s in secs:
        end = d.index(b"\0", stroff + s[0])
        if d[stroff + s[0]:end] == b".nv_fatbin":
            return s[4], s[5]
    sys.exit("no .nv_fatbin section")


def fatbins(d, off, size):
    """(start, header size, payload size, [(entry offset, entry header size, payload size)]) per fatbin."""
    pos, end, out = off, off + size, []
    while pos < end - 16:
        magic, version, hsize, fsize = struct.unpack_from("<IHHQ", d, pos)
        if magic != FATBIN_MAGIC:
            if any(d[pos:pos + 8]):
                sys.exit(f"unexpected bytes at {pos - off} in .nv_fatbin")
            pos += 8  # alignment padding between fatbins
            continue
        if version != 1 or hsize != 16:
            sys.exit(f"fatbin at {pos - off}: unknown header (version {version}, size {hsize})")
        entries, e = [], pos + hsize
        while e < pos + hsize + fsize:
            _, _, ehsize, psize = struct.unpack_from("<HHIQ", d, e)
            entries.append((e, ehsize, psize))
            e += ehsize + psize
        out.append((pos, hsize, fsize, entries))
        pos += hsize + fsize
    return out


def zstd(args, data, tmp):
    # Through a file, not a pipe: zstd writes the content size only when it knows the input's size.
    with tempfile.NamedTemporaryFile(dir=tmp, delete=False) as f:
        f.write(data)
    try:
        return subprocess.run(["zstd", *args, "-c", f.name], check=True, capture_output=True).stdout
    finally:
        os.unlink(f.name)


def ptx_entry(d, entries):
    found = [(e, h, p) for e, h, p in entries if struct.unpack_from("<H", d, e)[0] == KIND_PTX and struct.unpack_from("<I", d, e + 28)[0] == TARGET_ARCH]
    if len(found) != 1:
        sys.exit(f"expected one compute_{TARGET_ARCH} PTX entry per fatbin, found {len(found)}")
    return found[0]


def patch(src, dst, ptx_dir):
    d = bytearray(open(src, "rb").read())
    off, size = nv_fatbin(d)
    fbs = fatbins(d, off, size)
    tmp = tempfile.mkdtemp()

    def one(i):
        start, hsize, fsize, entries = fbs[i]
        e, ehsize, psize = ptx_entry(d, entries)
        header = bytearray(d[e:e + ehsize])
        csize, = struct.unpack_from("<I", header, 16)
        minor, major = struct.unpack_from("<HH", header, 24)
        flags, = struct.unpack_from("<Q", header, 40)
        usize, = struct.unpack_from("<Q", header, 56)
        payload = bytes(d[e + ehsize:e + ehsize + csize])
        if not payload.startswith(ZSTD_MAGIC):
            sys.exit(f"fatbin {i}: PTX payload is not zstd (flags {flags:#x})")
        text = zstd(["-d", "-q"], payload, tmp)
        if len(text) != usize:
            sys.exit(f"fatbin {i}: PTX is {len(text)} bytes, header says {usize}")
        if (major, minor) == (9, 1):
            if text.count(b"\n.version 9.1\n") != 1:
                sys.exit(f"fatbin {i}: no single '.version 9.1' line")
            text = text.replace(b"\n.version 9.1\n", b"\n.version 9.0\n")
            struct.pack_into("<HH", header, 24, 0, 9)
        elif (major, minor) > (9, 0):
            sys.exit(f"fatbin {i}: PTX ISA {major}.{minor}: only 9.1 is handled")
        frame = zstd(ZSTD_ARGS, text, tmp)
        padded = frame + bytes(-len(frame) % 8)
        struct.pack_into("<Q", header, 8, len(padded))
        struct.pack_into("<I", header, 16, len(frame))
        new = struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(header) + len(padded)) + bytes(header) + padded
        if len(new) > hsize + fsize:
            sys.exit(f"fatbin {i}: rewritten fatbin ({len(new)} bytes) outgrows its place ({hsize + fsize})")
        if ptx_dir:
            open(os.path.join(ptx_dir, f"m{i:03d}.ptx"), "wb").write(text.rstrip(b"\0"))
        return i, new, csize, len(frame)

    if ptx_dir:
        os.makedirs(ptx_dir, exist_ok=True)
    with ThreadPoolExecutor(max_workers=int(os.environ.get("KIT_CUDA_JOBS", "2"))) as pool:
        results = list(pool.map(one, range(len(fbs))))
    before = after = 0
    for i, new, c0, c1 in results:
        start, hsize, fsize, _ = fbs[i]
        d[start:start + hsize + fsize] = new + bytes(hsize + fsize - len(new))
        before += c0
        after += c1
    open(dst, "wb").write(d)
    os.chmod(dst, 0o755)
    os.rmdir(tmp)
    print(f"{len(fbs)} fatbins rewritten to compute_{TARGET_ARCH} PTX ISA 9.0 only: PTX {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB compressed; "
          f"{sum(f + 16 for _, _, f, _ in fbs) / 1e6:.1f} MB of fatbins -> {sum(len(r[1]) for r in results) / 1e6:.1f} MB")


def check(path):
    d = open(path, "rb").read()
    off, size = nv_fatbin(d)
    fbs = fatbins(d, off, size)
    tmp = tempfile.mkdtemp()
    for i, (start, hsize, fsize, entries) in enumerate(fbs):
        if len(entries) != 1:
            sys.exit(f"fatbin {i}: {len(entries)} entries")
        e, ehsize, psize = ptx_entry(d, entries)
        csize, = struct.unpack_from("<I", d, e + 16)
        minor, major = struct.unpack_from("<HH", d, e + 24)
        usize, = struct.unpack_from("<Q", d, e + 56)
        text = zstd(["-d", "-q"], d[e + ehsize:e + ehsize + csize], tmp)
        if (major, minor) != (9, 0) or len(text) != usize or b"\n.version 9.0\n" not in text or b"\n.target sm_90" not in text:
            sys.exit(f"fatbin {i}: check failed (ISA {major}.{minor}, {len(text)} of {usize} bytes)")
    os.rmdir(tmp)
    print(f"ok: {len(fbs)} fatbins, each one compute_{TARGET_ARCH} PTX ISA 9.0 entry")


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) == 2 and a[0] == "--check":
        check(a[1])
    elif len(a) in (2, 4) and (len(a) == 2 or a[2] == "--ptx-dir"):
        patch(a[0], a[1], a[3] if len(a) == 4 else None)
    else:
        sys.exit(__doc__)
