"""Where the component's bytes go: code per crate, and the WIT export glue.

Usage: python3 code_size.py COMPONENT.wasm [--top N]

The component must keep its name section; build one beside the release one
(the cdylib alone, as `cargo xtask build` does, without its `wasm-opt` step,
which drops the names):

    cargo rustc --target wasm32-wasip2 --release -p mongo-wasi --lib --crate-type cdylib \
        --target-dir target/size --config profile.release.strip=false
    python3 host-tests/bench/code_size.py target/size/wasm32-wasip2/release/mongo_wasi.wasm

It reads the largest core module inside the component (the driver; the others
are the adapter's shims) and sums function body sizes by the crate of each
function's mangled name. WIT exports (named `mongo-wasi:driver/...`) are the glue
wit-bindgen generates: lifting the arguments and lowering the result.
"""

import collections
import re
import sys


def leb(b, i):
    """An unsigned LEB128 at `b[i]`: (value, next index)."""
    value = shift = 0
    while True:
        byte = b[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def sections(b):
    """(id, body) of each section of a module or component."""
    i = 8
    while i < len(b):
        sid = b[i]
        size, i = leb(b, i + 1)
        yield sid, b[i : i + size]
        i += size


def name(b, i):
    n, i = leb(b, i)
    return b[i : i + n].decode(errors="replace"), i + n


def imported_functions(body):
    count, i = leb(body, 0)
    funcs = 0
    for _ in range(count):
        _, i = name(body, i)
        _, i = name(body, i)
        kind = body[i]
        i += 1
        if kind == 0:  # function: type index
            _, i = leb(body, i)
            funcs += 1
        elif kind == 1:  # table: reftype, limits
            flags = body[i + 1]
            _, i = leb(body, i + 2)
            if flags & 1:
                _, i = leb(body, i)
        elif kind == 2:  # memory: limits
            flags = body[i]
            _, i = leb(body, i + 1)
            if flags & 1:
                _, i = leb(body, i)
        elif kind == 3:  # global: valtype, mutability
            i += 2
        else:
            sys.exit(f"unknown import kind {kind}")
    return funcs


def function_names(body):
    """The name section's function names, by function index."""
    names, i = {}, 0
    while i < len(body):
        sub = body[i]
        size, i = leb(body, i + 1)
        if sub == 1:
            count, j = leb(body, i)
            for _ in range(count):
                index, j = leb(body, j)
                names[index], j = name(body, j)
        i += size
    return names


def crate_of(symbol):
    if symbol.startswith("mongo-wasi:driver/"):
        return "(WIT export glue)"
    if symbol.startswith("cabi_post_"):
        return "(WIT post-return glue)"
    legacy = re.match(r"_ZN(\d+)", symbol)
    if legacy:
        first = symbol[legacy.end() : legacy.end() + int(legacy.group(1))]
        inner = re.search(r"_\$LT\$([A-Za-z0-9_]+)\.\.", first)
        if not first.startswith("_$LT$"):
            return first
        return inner.group(1) if inner else "(trait impls for references and std types)"
    v0 = re.search(r"C[sa-zA-Z0-9_]*?_(\d+)([a-z_][a-z0-9_]*)", symbol)
    if symbol.startswith("_R") and v0:
        return v0.group(2)[: int(v0.group(1))]
    return "(C: libc, ring's C, allocator)"


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        sys.exit(__doc__)
    top = int(args[args.index("--top") + 1]) if "--top" in args else 20
    data = open(args[0], "rb").read()
    modules = [body for sid, body in sections(data) if sid == 1] or [data]
    core = max(modules, key=len)
    imports, names, bodies, data_bytes = 0, {}, [], 0
    for sid, body in sections(core):
        if sid == 0:
            section, i = name(body, 0)
            if section == "name":
                names = function_names(body[i:])
        elif sid == 2:
            imports = imported_functions(body)
        elif sid == 10:
            count, i = leb(body, 0)
            for _ in range(count):
                size, i = leb(body, i)
                bodies.append(size)
                i += size
        elif sid == 11:
            data_bytes = len(body)
    if not names:
        sys.exit("no name section: build with --config profile.release.strip=false")
    per_crate, glue = collections.Counter(), []
    for index, size in enumerate(bodies):
        symbol = names.get(imports + index, "?")
        per_crate[crate_of(symbol)] += size
        if symbol.startswith("mongo-wasi:driver/"):
            glue.append(size)
    code = sum(bodies)
    print(f"component {len(data):,} bytes; driver core module: code {code:,} bytes "
          f"in {len(bodies):,} functions, data {data_bytes:,} bytes")
    for crate, size in per_crate.most_common(top):
        print(f"{size:>10,} {100 * size / code:5.1f}%  {crate}")
    big = [s for s in glue if s > 1000]
    if glue:
        print(f"WIT exports: {len(glue)}, {sum(glue):,} bytes; {len(big)} of them over "
              f"1,000 bytes (median {sorted(big)[len(big) // 2] if big else 0:,}): "
              "each lifts its arguments and lowers its result, with what LLVM inlined into it")


if __name__ == "__main__":
    main()
