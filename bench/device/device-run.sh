#!/usr/bin/env bash
# The device side of the device kit (bench/device/device-kit.sh builds it; .devkit/PLAN.md lists the
# calls). Run from the repo copy on the device machine, as root:
#
#   bash bench/device/device-run.sh unpack-base    node, node_modules, X-lib fallback -> /tmp/kit (/var/lib/devkit if /tmp
#                                             is noexec); Vulkan loader debs (.gl) -> / (those the image lacks)
#   bash bench/device/device-run.sh add-cuda N     store CUDA piece N; with all pieces there, assemble libggml-cuda.so
#   bash bench/device/device-run.sh probe          GPU, Vulkan, Dawn, onnxruntime WebGPU, node-llama-cpp cpu/vulkan (+cuda if assembled)
#   bash bench/device/device-run.sh probe-cuda     node-llama-cpp's CUDA build only
#   bash bench/device/device-run.sh bench ARGS...  node /tmp/kit/js/bench.mjs ARGS (= npm run bench -- ARGS) from the repo root
#   bash bench/device/device-run.sh gpu-check      issue 34's one GPU run (under 8 minutes, each step under its own timeout):
#                                             shader-f16 with and without the Dawn toggle, greedy tokens of every GPU
#                                             executor vs cpu, an onnxruntime profile of 16 decode steps, bench executors,
#                                             bench llamacpp: our device pool vs llama.cpp CUDA, then vs llama.cpp
#                                             Vulkan, and our host pool on node-webgpu; all in $OUT/gpu-check.log
#   bash bench/device/device-run.sh exec CMD...    any command in the kit's environment
#   bash bench/device/device-run.sh env            print that environment
#
# Logs go to $OUT (probe.log, bench.log, bench-out.tgz). Every subcommand that needs an earlier
# call's work checks for it and exits 3 with "COLD MACHINE" when it is gone.
# Local test overrides: KIT_DIR (default /tmp/kit), ROOT (where the .gl debs go, default /; any
# other ROOT puts ROOT/usr/lib/x86_64-linux-gnu on LD_LIBRARY_PATH instead of running ldconfig),
# KIT_FORCE_GL=1 (unpack the debs even where the image has the library), OUT, and KIT_NO_XZ=1 /
# KIT_NO_DPKG=1 (take the python3 fallbacks as if xz / dpkg were missing).
set -uo pipefail
export PATH=$PATH:/usr/sbin:/sbin:/usr/local/nvidia/bin:/usr/local/cuda/bin # ldconfig, nvidia-smi, cuobjdump

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ROOT=${ROOT:-/}
if [ -z "${KIT_DIR:-}" ]; then
  # /tmp/kit, unless /tmp cannot hold executables (node, .so and .node files must be mapped executable).
  KIT_DIR=/tmp/kit
  if [ ! -f /tmp/kit/.base-ok ] && [ "${1:-}" = unpack-base ]; then
    mkdir -p /tmp/kit && printf '#!/bin/sh\nexit 0\n' >/tmp/kit/.exec-test && chmod 755 /tmp/kit/.exec-test
    /tmp/kit/.exec-test 2>/dev/null || KIT_DIR=/var/lib/devkit
    rm -f /tmp/kit/.exec-test
  elif [ -f /var/lib/devkit/.base-ok ] && [ ! -f /tmp/kit/.base-ok ]; then
    KIT_DIR=/var/lib/devkit
  fi
fi
export KIT_DIR
OUT=${OUT:-$KIT_DIR/out}
mkdir -p "$OUT"
CUDA_LIB=$KIT_DIR/node_modules/@node-llama-cpp/linux-x64-cuda/bins/linux-x64-cuda/libggml-cuda.so
NVIDIA_ICD=${KIT_VK_ICD:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
NVIDIA_EGL=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json

say() { printf '[device-run %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { say "ERROR: $*"; exit "${2:-1}"; }
cold() { say "COLD MACHINE: $* is missing: the machine was not warm (or call 1 did not run). Start again at call 1."; exit 3; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
manifest() { awk -v k="$1" '$1 == k { print $2 }' "$KIT_DIR/manifest.txt"; }

have() { local no="KIT_NO_${1^^}"; [ -z "${!no:-}" ] && command -v "$1" >/dev/null; }
# xz -d, or Python's lzma where the image has no xz.
unxz_to() { # FILE DEST
  if have xz; then xz -dc "$1" >"$2"; else python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"), 1 << 20)' "$1" "$2"; fi
}
untxz() { # FILE DIR
  mkdir -p "$2"
  if have xz; then tar -C "$2" -xJf "$1"; else
    python3 -c 'import sys,tarfile; t = tarfile.open(sys.argv[1], "r:xz"); t.extractall(sys.argv[2], **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))' "$1" "$2"
  fi
}
# dpkg -x, or ar + tar by hand where dpkg is missing.
deb_x() { # DEB DIR
  if have dpkg; then dpkg -x "$1" "$2"; return; fi
  python3 - "$1" "$2" <<'PY'
import io, sys, tarfile
d = open(sys.argv[1], "rb").read(); i = 8
while i < len(d):
    name = d[i:i+16].decode().strip().rstrip("/"); size = int(d[i+48:i+58]); body = d[i+60:i+60+size]
    if name.startswith("data.tar"):
        t = tarfile.open(fileobj=io.BytesIO(body), mode="r:*")
        t.extractall(sys.argv[2], **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
    i += 60 + size + (size & 1)
PY
}

timed() { # NAME SECONDS CMD... : runs CMD under timeout, prints its time and status
  local name=$1 secs=$2; shift 2
  local t=$SECONDS
  echo "=== $name"
  timeout -k 5 "$secs" "$@"
  local rc=$?
  local note="rc $rc"
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && note="TIMED OUT after ${secs}s"
  echo "--- $name: $note, $((SECONDS - t)) s"
  return 0
}

need_base() { [ -f "$KIT_DIR/.base-ok" ] || cold "$KIT_DIR (call 1's unpack-base)"; }

# The soname each .gl deb provides (device-kit.sh names the debs after their packages).
declare -A GL_SONAME=([libvulkan1]=libvulkan.so.1 [libglvnd0]=libGLdispatch.so.0 [libegl1]=libEGL.so.1
  [libopengl0]=libOpenGL.so.0 [libgl1]=libGL.so.1 [libglx0]=libGLX.so.0 [libgles2]=libGLESv2.so.2)

gl_unpack() {
  [ -d "$REPO/.gl" ] || { say ".gl not carried: Vulkan loader not unpacked"; return 0; }
  mkdir -p "$ROOT"
  local f pkg so unpacked=() skipped=()
  for f in "$REPO"/.gl/*.deb; do
    pkg=$(basename "$f" .deb)
    so=${GL_SONAME[$pkg]:-}
    # On /, a library the image already has stays as it is.
    if [ "$ROOT" = / ] && [ -z "${KIT_FORCE_GL:-}" ] && [ -n "$so" ] && ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$so "; then
      skipped+=("$pkg")
      continue
    fi
    deb_x "$f" "$ROOT" || die "could not unpack $f"
    unpacked+=("$pkg")
  done
  [ "$ROOT" = / ] && [ ${#unpacked[@]} -gt 0 ] && ldconfig
  say "Vulkan loader debs: unpacked into $ROOT: ${unpacked[*]:-none}; already there: ${skipped[*]:-none}"
}

cmd_unpack_base() {
  local t=$SECONDS b=$REPO/.devkit/base
  [ -f "$b/manifest.txt" ] || die ".devkit/base not carried (carry .devkit/base in this call)"
  mkdir -p "$KIT_DIR"
  cp "$b/manifest.txt" "$KIT_DIR/manifest.txt"
  for part in node modules xlibs; do
    local f
    f=$b/$(awk -v k=$part '$1 == k { print $3 }' "$b/manifest.txt")
    [ "$(sha "$f")" = "$(manifest $part)" ] || die "$f: sha256 differs from the manifest (transfer broken? rebuild the kit)"
  done
  mkdir -p "$KIT_DIR/node/bin"
  unxz_to "$b/node.xz" "$KIT_DIR/node/bin/node" && chmod 755 "$KIT_DIR/node/bin/node" || die "node unpack failed"
  # A CUDA library assembled by an earlier call survives a repeated unpack-base.
  [ -f "$CUDA_LIB" ] && mv "$CUDA_LIB" "$KIT_DIR/libggml-cuda.so.keep"
  rm -rf "$KIT_DIR/node_modules"
  untxz "$b/modules.txz" "$KIT_DIR" || die "node_modules unpack failed"
  [ -f "$KIT_DIR/libggml-cuda.so.keep" ] && mv "$KIT_DIR/libggml-cuda.so.keep" "$CUDA_LIB"
  rm -rf "$KIT_DIR/xlibs"
  untxz "$b/xlibs.txz" "$KIT_DIR/xlibs" || die "xlibs unpack failed"
  gl_unpack
  unpack_js
  head -1 "$KIT_DIR/manifest.txt" >"$KIT_DIR/.base-ok"
  say "base unpacked in $((SECONDS - t)) s: node $("$KIT_DIR/node/bin/node" --version), node_modules $(du -sh "$KIT_DIR/node_modules" | cut -f1)"
}

unpack_js() {
  local f=$REPO/.devkit/js/kit-js.txz
  if [ -f "$f" ]; then
    rm -rf "$KIT_DIR/js" && untxz "$f" "$KIT_DIR/js" || die "js unpack failed"
    say "bundles from $(head -1 "$KIT_DIR/js/commit.txt") (+ working-tree changes at build time)"
  fi
  [ -f "$KIT_DIR/js/bench.mjs" ] || cold "$KIT_DIR/js/bench.mjs (carry .devkit/js)"
}

cmd_add_cuda() {
  local n=${1:?add-cuda N}
  need_base
  local pieces
  read -r -a pieces < <(awk '$1 == "cuda-pieces" { $1 = ""; print }' "$KIT_DIR/manifest.txt")
  [ ${#pieces[@]} -gt 0 ] || die "this kit has no CUDA library (built with KIT_CUDA=none)"
  mkdir -p "$KIT_DIR/cuda"
  if [ -f "$CUDA_LIB" ]; then say "libggml-cuda.so already assembled"; return 0; fi
  local src=$REPO/.devkit/cuda-$n/part
  [ -f "$src" ] || die ".devkit/cuda-$n not carried"
  [ "$(sha "$src")" = "$(manifest cuda-$n)" ] || die "piece $n: sha256 differs from the manifest (transfer broken, or a piece of another kit build)"
  mv -f "$src" "$KIT_DIR/cuda/part-$n"
  local missing=() parts=() i
  for i in "${pieces[@]}"; do
    parts+=("$KIT_DIR/cuda/part-$i")
    [ -f "$KIT_DIR/cuda/part-$i" ] || missing+=("$i")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "stored CUDA piece $n (pieces: ${pieces[*]}); still to come with call(s) ${missing[*]}"
    return 0
  fi
  local t=$SECONDS
  if have xz; then
    cat "${parts[@]}" | xz -dc >"$CUDA_LIB.tmp"
  else
    cat "${parts[@]}" | python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), open(sys.argv[1], "wb"), 1 << 20)' "$CUDA_LIB.tmp"
  fi
  [ "$(sha "$CUDA_LIB.tmp")" = "$(manifest cuda-lib)" ] || die "assembled libggml-cuda.so: sha256 differs from the manifest"
  mv "$CUDA_LIB.tmp" "$CUDA_LIB"
  rm -f "${parts[@]}"
  say "libggml-cuda.so assembled ($(du -h "$CUDA_LIB" | cut -f1)) in $((SECONDS - t)) s"
}

# The kit's environment, computed once per machine into $KIT_DIR/env.sh.
kit_env() {
  need_base
  if [ ! -f "$KIT_DIR/env.sh" ]; then
    rm -f "$KIT_DIR/env.sh.tmp"
    local ld="" d f
    # CUDA 13 runtime and cuBLAS for libggml-cuda.so: the torch venv's nvidia wheels, else the toolkit.
    local roots=()
    d=$(timeout 30 python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]) + "/nvidia")' 2>/dev/null) && roots+=("$d")
    roots+=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /opt /usr/local /usr/lib)
    for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
      f=""
      for r in "${roots[@]}"; do
        [ -d "$r" ] || continue
        f=$(timeout 60 find "$r" -name "$lib*" \( -type f -o -type l \) 2>/dev/null | head -1)
        [ -n "$f" ] && break
      done
      if [ -n "$f" ]; then
        d=$(dirname "$f")
        case ":$ld:" in *":$d:"*) ;; *) ld=$ld${ld:+:}$d ;; esac
      else
        echo "# $lib not found (CUDA builds will not load)" >>"$KIT_DIR/env.sh.tmp"
      fi
    done
    # Vulkan loader unpacked elsewhere than / (local tests).
    [ "$ROOT" != / ] && ld=$ld${ld:+:}$ROOT/usr/lib/x86_64-linux-gnu
    {
      if [ -f "$NVIDIA_ICD" ]; then
        echo "export VK_DRIVER_FILES=$NVIDIA_ICD VK_ICD_FILENAMES=$NVIDIA_ICD"
        [ -f "$NVIDIA_EGL" ] && echo "export __EGL_VENDOR_LIBRARY_FILENAMES=$NVIDIA_EGL"
        # The ICD's library (a bare name: looked up like any library) and its own dependencies.
        local icdlib path=""
        icdlib=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ICD"]["library_path"])' "$NVIDIA_ICD" 2>/dev/null)
        case "$icdlib" in
          "") ;;
          /*) path=$icdlib ;;
          *)
            path=$(ldconfig -p | awk -v l="$icdlib" '$1 == l { print $NF; exit }')
            if [ -z "$path" ]; then
              path=$(timeout 60 find /usr/local/nvidia /usr/lib /usr/lib64 -name "$icdlib" 2>/dev/null | head -1)
              [ -n "$path" ] && ld=$ld${ld:+:}$(dirname "$path") && echo "# $icdlib found outside ldconfig's paths: $path"
            fi ;;
        esac
        [ -n "$icdlib" ] && [ -z "$path" ] && echo "# $icdlib (Vulkan ICD library) not found"
        if [ -n "$path" ] && LD_LIBRARY_PATH=$ld ldd "$path" 2>/dev/null | grep -q 'not found'; then
          ld=$ld${ld:+:}$KIT_DIR/xlibs
          echo "# $icdlib lacks libraries ($(LD_LIBRARY_PATH=$ld ldd "$path" 2>/dev/null | grep -c 'not found') still missing with the kit's X libs)"
        fi
      fi
      echo "export LD_LIBRARY_PATH=$ld\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    } >>"$KIT_DIR/env.sh.tmp"
    mv "$KIT_DIR/env.sh.tmp" "$KIT_DIR/env.sh"
  fi
  # shellcheck disable=SC1091
  . "$KIT_DIR/env.sh"
  export PATH=$KIT_DIR/node/bin:$PATH
  export AGENT_EDGE_CACHE_DIR=${AGENT_EDGE_CACHE_DIR:-$REPO/.cache}
  export NODE_LLAMA_CPP_SKIP_DOWNLOAD=true
  # libggml-cuda.so's kernels are PTX (see bench/device/device-kit-cuda.py): the driver's JIT cache, kept
  # with the kit (across processes and warm calls) and large enough for all of it.
  export CUDA_CACHE_PATH=${CUDA_CACHE_PATH:-$KIT_DIR/cuda-jit-cache} CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-4294967296}
  unset CUDA_CACHE_DISABLE
  [ -n "${XDG_RUNTIME_DIR:-}" ] && [ -w "$XDG_RUNTIME_DIR" ] || export XDG_RUNTIME_DIR=$(mktemp -d)
  unset NODE_PATH NODE_OPTIONS
  cd "$REPO" || exit 1
}

cmd_probe() {
  need_base
  [ -f "$REPO/.devkit/js/kit-js.txz" ] && unpack_js
  kit_env
  local P="node $KIT_DIR/js/device-probe.mjs"
  {
    timed "machine" 10 bash -c 'uname -r; nproc; free -g | head -2; grep -m1 "model name" /proc/cpuinfo; echo "cpu flags: $(grep -m1 ^flags /proc/cpuinfo | tr " " "\n" | grep -E "^(avx2|avx512f|avx512_vnni|avx512_bf16|avx_vnni|amx_tile|amx_bf16|amx_int8|f16c|fma)$" | tr "\n" " ")"'
    timed "nvidia-smi -L" 20 nvidia-smi -L
    timed "nvidia-smi" 20 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm --format=csv
    timed "vulkan loader (ldconfig)" 10 bash -c 'ldconfig -p | grep -iE "vulkan|GLX_nvidia|GLdispatch|libcuda\.so" || echo "(none in ldconfig)"'
    timed "nvidia ICD" 10 bash -c "ls -l $(dirname "$NVIDIA_ICD") 2>&1; cat $NVIDIA_ICD 2>&1"
    timed "kit env" 5 bash -c "cat $KIT_DIR/env.sh; echo PATH=\$PATH; command -v node"
    timed "ICD library deps" 20 bash -c 'l=$(ldconfig -p | awk "/libGLX_nvidia.so.0/ { print \$NF; exit }"); [ -z "$l" ] && l=$(find /usr/local/nvidia -name "libGLX_nvidia.so.0" 2>/dev/null | head -1); echo "$l"; [ -n "$l" ] && ldd "$l" | grep -E "not found|X11|Xext|GLdispatch"'
    if command -v vulkaninfo >/dev/null; then timed "vulkaninfo --summary" 60 vulkaninfo --summary; else echo "=== vulkaninfo: not installed"; fi
    timed "node" 10 node -e 'console.log(process.execPath, process.version, process.arch)'
    timed "dawn adapter (webgpu package)" 60 $P dawn
    timed "webgpu-probe --quick (onnxruntime-node WebGPU EP, onnxruntime-web on Dawn)" 240 node "$KIT_DIR/js/webgpu-probe.mjs" --quick
    timed "node-llama-cpp gpu=false" 90 $P llama false
    timed "node-llama-cpp gpu=vulkan" 120 $P llama vulkan
    timed "llama-run vulkan Q4_0 (first tokens hold the pipeline compiles)" 240 $P llama-run vulkan Q4_0
    if [ -f "$CUDA_LIB" ]; then cuda_checks; else echo "=== node-llama-cpp gpu=cuda: skipped, libggml-cuda.so not assembled yet"; fi
  } 2>&1 | tee -a "$OUT/probe.log"
}

cuda_checks() {
  # The fatbins as the CUDA tools read them (cuobjdump is in the device image): one compute_90 PTX per module.
  if command -v cuobjdump >/dev/null; then
    timed "cuobjdump libggml-cuda.so" 60 bash -c 'echo "PTX: $(cuobjdump --list-ptx "$1" | wc -l) files, $(cuobjdump --list-ptx "$1" | grep -c sm_90) of them sm_90; SASS: $(cuobjdump --list-elf "$1" 2>/dev/null | wc -l) files"' _ "$CUDA_LIB"
  fi
  timed "node-llama-cpp gpu=cuda" 180 node "$KIT_DIR/js/device-probe.mjs" llama cuda
  # Kernels for real, one process per GGUF type at once: each JIT-compiles the modules it uses into
  # the shared cache (CUDA_CACHE_PATH), so the bench that follows finds them compiled.
  local t=$SECONDS ty
  echo "=== llama-run cuda F32 F16 Q8_0 Q4_0 (in parallel; the first tokens hold the JIT compiles)"
  for ty in F32 F16 Q8_0 Q4_0; do
    timeout -k 5 "${KIT_JIT_TIMEOUT:-300}" node "$KIT_DIR/js/device-probe.mjs" llama-run cuda $ty >"$KIT_DIR/llama-run-$ty.log" 2>&1 &
  done
  wait
  for ty in F32 F16 Q8_0 Q4_0; do grep -v "control-looking token" "$KIT_DIR/llama-run-$ty.log"; done
  echo "--- llama-run cuda: $((SECONDS - t)) s"
}

cmd_probe_cuda() {
  need_base
  [ -f "$CUDA_LIB" ] || cold "$CUDA_LIB (all add-cuda calls)"
  kit_env
  cuda_checks 2>&1 | tee -a "$OUT/probe.log"
}

cmd_bench() {
  need_base
  [ -f "$REPO/.devkit/js/kit-js.txz" ] && unpack_js
  [ -f "$KIT_DIR/js/bench.mjs" ] || cold "$KIT_DIR/js/bench.mjs"
  [ -f "$CUDA_LIB" ] || say "note: libggml-cuda.so not assembled: llama.cpp's CUDA build will not load"
  kit_env
  say "bench $*" | tee -a "$OUT/bench.log"
  local t=$SECONDS
  node "$KIT_DIR/js/bench.mjs" "$@" 2>&1 | tee -a "$OUT/bench.log"
  local rc=${PIPESTATUS[0]}
  say "bench $1: exit $rc after $((SECONDS - t)) s" | tee -a "$OUT/bench.log"
  if [ -d "$REPO/bench/out" ]; then tar -C "$REPO" -czf "$OUT/bench-out.tgz" bench/out; fi
  return "$rc"
}

cmd_gpu_check() {
  need_base
  [ -f "$REPO/.devkit/js/kit-js.txz" ] && unpack_js
  [ -f "$KIT_DIR/js/bench.mjs" ] || cold "$KIT_DIR/js/bench.mjs"
  kit_env
  local P="node $KIT_DIR/js/device-probe.mjs" B="node $KIT_DIR/js/bench.mjs" start=$SECONDS
  # Steps past 420 s are skipped (said so), so the call ends inside its 8 minutes with what it has.
  step() { local left=$((420 - (SECONDS - start))); if [ "$left" -lt 30 ]; then echo "=== $1: SKIPPED (out of time)"; return 0; fi
    local secs=$2; [ "$secs" -gt "$left" ] && secs=$left; local name=$1; shift 2; timed "$name" "$secs" "$@"; }
  {
    say "gpu-check on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi'), $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo 'tree')"
    step "dawn adapter, shader-f16 with and without DAWN_FLAGS" 30 $P dawn
    step "greedy: every GPU executor vs cpu (default model, fp32 weights)" 90 $P greedy
    step "profile: 16 device-pool decode steps" 60 $P profile
    step "bench executors --json" 90 $B executors --json
    [ -f "$CUDA_LIB" ] && step "bench llamacpp: device-pool vs llama.cpp CUDA" 120 $B llamacpp --quick --json --executor device-pool --llama-gpu cuda --weights fp16,int4
    step "bench llamacpp: llama.cpp Vulkan" 60 $B llamacpp --quick --json --llama-gpu vulkan --only llamacpp --weights fp16,int4
    step "bench llamacpp: host-pool on node-webgpu" 60 $B llamacpp --quick --json --executor host-pool --provider node-webgpu --only ours --weights fp16
    say "gpu-check done in $((SECONDS - start)) s"
  } 2>&1 | tee -a "$OUT/gpu-check.log"
  if [ -d "$REPO/bench/out" ]; then tar -C "$REPO" -czf "$OUT/bench-out.tgz" bench/out; fi
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  unpack-base) cmd_unpack_base ;;
  add-cuda) cmd_add_cuda "$@" ;;
  probe) cmd_probe ;;
  probe-cuda) cmd_probe_cuda ;;
  bench) cmd_bench "$@" ;;
  gpu-check) cmd_gpu_check ;;
  exec) kit_env && "$@" ;;
  env) kit_env && { cat "$KIT_DIR/env.sh"; echo "PATH=$PATH"; echo "AGENT_EDGE_CACHE_DIR=$AGENT_EDGE_CACHE_DIR"; } ;;
  *) sed -n '2,23p' "${BASH_SOURCE[0]}"; exit 2 ;;
esac
