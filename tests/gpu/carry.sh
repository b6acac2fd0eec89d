# Sourced by the packaging scripts (tests/gpu/package*.sh,
# tests/bench/package-mover.sh): what every GPU run carries.  The GPU image
# has no package manager access, so kvtier's binaries travel with the
# libraries they need.  Run from the repository root, with build/ configured.

nvcc=${NVCC:-$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")}

# carry_kvtier DIR: empties DIR, then kvtierd, kvtierctl and libkvtier.so
# from build/, their libraries in DIR/lib (libsystemd's own dependencies
# too), and DIR/COMMIT.
carry_kvtier() {
        local out=$1 p dep
        rm -rf "$out"; mkdir -p "$out/lib"
        make -C build -j"$(nproc)" >/dev/null
        cp build/kvtierd build/kvtierctl build/.libs/libkvtier.so "$out/"
        for l in libinih.so.1 libjson-c.so.5 libnuma.so.1 libsystemd.so.0 liburing.so.2 libxxhash.so.0 libzstd.so.1; do
                # reads all of ldconfig's output: an early exit would kill it
                # with SIGPIPE, which pipefail makes a failure
                p=$(ldconfig -p | awk -v l="$l" '$1 == l && /x86-64/ && !f { print $NF; f = 1 }')
                cp -L "$p" "$out/lib/"
        done
        # liblz4, libzstd, libgcrypt, libcap ... that libsystemd pulls in.
        for dep in $(ldd "$out/lib/libsystemd.so.0" | awk '/=> \// { print $3 }'); do
                case "$(basename "$dep")" in libc.so*|libm.so*|ld-linux*) ;; *) cp -L "$dep" "$out/lib/" ;; esac
        done
        git describe --always --dirty >"$out/COMMIT"
        # DIR/bin/kvtierd, DIR/bin/kvtierctl: run with the carried libraries,
        # wherever DIR lands (nothing else gets them: the image's Python must
        # keep its own liblzma and friends).
        mkdir -p "$out/bin"
        for p in kvtierd kvtierctl; do
                printf '#!/bin/sh\nd=$(cd "$(dirname "$0")/.." && pwd)\nLD_LIBRARY_PATH="$d/lib" exec "$d/%s" "$@"\n' \
                        "$p" >"$out/bin/$p"
                chmod +x "$out/bin/$p"
        done
}

# carry_engine DIR: the test engine against real CUDA (tests/gpu/backend-cuda.cu)
# as DIR/kv-engine-cuda, with a dynamically linked runtime the shim can hook.
carry_engine() {
        local out=$1 obj
        obj=$(mktemp -d)
        "$nvcc" -O2 -std=c++17 -arch=sm_90 -Itests/engine -c tests/gpu/backend-cuda.cu -o "$obj/backend.o"
        cc -O2 -std=gnu11 -Wall -Itests/engine -Ishim -c tests/engine/kv-engine.c -o "$obj/kv-engine.o"
        "$nvcc" -arch=sm_90 -cudart shared "$obj/kv-engine.o" "$obj/backend.o" -o "$out/kv-engine-cuda" -L"$(dirname "$nvcc")/../lib64/stubs" -lcuda -ldl
        rm -rf "$obj"
}
