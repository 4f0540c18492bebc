#!/usr/bin/env bash
# Builds .devkit/: everything `npm run bench` needs on the device machine (x86-64, H200, CUDA 13,
# no network, no node), cut into `run` calls of at most 64 MiB each (the repo's working tree is
# sent with every call). bench/device/device-run.sh is the device side; .devkit/PLAN.md lists the calls.
#
#   bash bench/device/device-kit.sh           build (cached parts are reused: a rebuild after a change of
#                                        bench code re-bundles in seconds)
#   bash bench/device/device-kit.sh --check   re-measure the working tree against the plan, build nothing
#   bash bench/device/device-kit.sh --recut   build, cutting the CUDA library anew (the cut is otherwise kept
#                                        while it fits, so that pieces already on the device still match)
#
# Parts (sizes printed at the end):
#   .devkit/js/kit-js.txz     bench.mjs (esbuild bundle of bench/main.ts), webgpu-probe.mjs,
#                             device-probe.mjs; externals: onnxruntime-node, onnxruntime-web,
#                             webgpu, node-llama-cpp, msgpackr-extract
#   .devkit/base/node.xz      this machine's node, stripped
#   .devkit/base/modules.txz  node_modules for those externals, linux-x64 only
#                             (bench/device/device-kit-modules.mjs), ELF files stripped, duplicates hard-linked
#   .devkit/base/xlibs.txz    libX11/libXext & co, put on LD_LIBRARY_PATH only if NVIDIA's Vulkan ICD lacks them
#   .devkit/base/manifest.txt sha256 of every part
#   .gl/*.deb                 Vulkan loader + glvnd (the device README's recipe), dpkg -x'd to /
#   .devkit/cuda-N/part       libggml-cuda.so (node-llama-cpp's CUDA 13 build), its fatbins rewritten to
#                             compute_90 PTX ISA 9.0 (bench/device/device-kit-cuda.py: the prebuilt cannot run
#                             on an H200 with driver 580 as it is), stripped, xz, cut into the calls' room
#
# Env: KIT_TOKENIZERS (default qwen3,llama2; add gemma3 for the gemma3 demo, +7 MB),
#      KIT_CALL_BUDGET bytes per call (default 64 MiB - 1 MiB), KIT_CUDA_XZ (default "-6"),
#      KIT_CUDA=patched (default) | prebuilt | none, KIT_CUDA_JOBS (zstd processes, default 2),
#      KIT_FAST=1 (xz -0 everywhere: for testing these scripts; the calls may not fit then).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
KIT=.devkit
CACHE=$KIT/cache
BUDGET=${KIT_CALL_BUDGET:-$((63 * 1024 * 1024))}
CUDA_XZ=${KIT_CUDA_XZ:--6}
CUDA_MODE=${KIT_CUDA:-patched}
case "$CUDA_MODE" in patched | prebuilt | none) ;; *) echo "KIT_CUDA must be patched, prebuilt or none" >&2; exit 2 ;; esac
NODE_XZ="--x86 --lzma2=preset=9e"
MODULES_XZ="--x86 --lzma2=preset=6"
if [ -n "${KIT_FAST:-}" ]; then # quick local tests of the scripts: light compression, may not fit the plan
  CUDA_XZ=-0 NODE_XZ=-0 MODULES_XZ=-0
fi
TOKENIZERS=${KIT_TOKENIZERS:-qwen3,llama2}
NICE="nice -n 19"
CUDA_SRC=node_modules/@node-llama-cpp/linux-x64-cuda/bins/linux-x64-cuda/libggml-cuda.so

log() { printf '[device-kit] %s\n' "$*" >&2; }
fsize() { stat -c %s "$1"; }
mib() { awk -v b="$1" 'BEGIN { printf "%.2f MiB", b / 1048576 }'; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
# Bytes of what travels with every call: tracked + untracked-not-ignored files that exist, and shared/.
tree_bytes() {
  { git ls-files -z -co --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null || true
    if [ -d shared ]; then find shared -type f -printf '%s\n'; fi
  } | awk '{ s += $1 } END { print s + 0 }'
}
dir_bytes() { find "$@" -type f -printf '%s\n' 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; }

if [ "${1:-}" = "--check" ]; then
  [ -f $KIT/plan.env ] || { echo "no plan: run bash bench/device/device-kit.sh first" >&2; exit 1; }
  . $KIT/plan.env
  now=$(tree_bytes)
  echo "working tree: $(mib "$now") now, $(mib "$PLAN_TREE") when the plan was made"
  status=0
  for i in $(seq 1 "$PLAN_CALLS"); do
    var=PLAN_CARRY_$i
    total=$((now + ${!var}))
    flag=ok
    [ "$total" -le $((64 * 1024 * 1024)) ] || { flag="OVER 64 MiB: rebuild the kit"; status=1; }
    echo "call $i: $(mib "$total") ($flag)"
  done
  exit $status
fi

[ "${1:-}" = "--recut" ] && rm -f $CACHE/cuda.split
[ -x node_modules/.bin/esbuild ] || { log "node_modules missing: npm ci first"; exit 1; }
[ -f "$CUDA_SRC" ] || { log "$CUDA_SRC missing (npm ci installs @node-llama-cpp/linux-x64-cuda)"; exit 1; }
EXCLUDE=$(git rev-parse --git-path info/exclude)
for p in /.devkit/ /.gl/; do grep -qxF "$p" "$EXCLUDE" 2>/dev/null || echo "$p" >>"$EXCLUDE"; done
mkdir -p $CACHE $KIT/base $KIT/js .gl
T0=$SECONDS

# --- 1. bundles -------------------------------------------------------------------------------
# `require` in the banner: bundled CommonJS code (msgpackr's native extractor, node:module look-ups)
# calls require() at run time, which an ES module lacks.
log "bundling bench/main.ts, bench/probes/webgpu-probe.ts, bench/device/device-probe.ts"
rm -rf $CACHE/js && mkdir -p $CACHE/js
for pair in bench/main.ts:bench.mjs bench/probes/webgpu-probe.ts:webgpu-probe.mjs bench/device/device-probe.ts:device-probe.mjs; do
  node_modules/.bin/esbuild "${pair%%:*}" --bundle --platform=node --format=esm --target=node20 \
    --outfile="$CACHE/js/${pair##*:}" --log-level=warning \
    --external:onnxruntime-node --external:onnxruntime-web --external:webgpu --external:node-llama-cpp --external:msgpackr-extract \
    --banner:js='import { createRequire as __kitCreateRequire } from "node:module"; const require = __kitCreateRequire(import.meta.url);'
done
git rev-parse --short HEAD >$CACHE/js/commit.txt
{ git status --short; } >>$CACHE/js/commit.txt
tar -C $CACHE/js -cf - . | xz -6 -T1 >$KIT/js/kit-js.txz

# --- 2. node ------------------------------------------------------------------------------------
NODE_BIN=$(readlink -f "$(command -v node)")
key="$(sha "$NODE_BIN") $NODE_XZ"
if [ "$(cat $CACHE/node.key 2>/dev/null)" != "$key" ] || [ ! -f $KIT/base/node.xz ]; then
  log "packing node $("$NODE_BIN" --version) ($NODE_BIN, $(mib "$(fsize "$NODE_BIN")")): strip + xz $NODE_XZ (about a minute, once)"
  strip -o $CACHE/node "$NODE_BIN"
  $NICE xz $NODE_XZ -T1 -c $CACHE/node >$KIT/base/node.xz.tmp
  mv $KIT/base/node.xz.tmp $KIT/base/node.xz
  rm -f $CACHE/node
  echo "$key" >$CACHE/node.key
fi

# --- 3. node_modules subset --------------------------------------------------------------------
key="$(cat package-lock.json bench/device/device-kit-modules.mjs | sha256sum | cut -d' ' -f1) $TOKENIZERS $MODULES_XZ"
if [ "$(cat $CACHE/modules.key 2>/dev/null)" != "$key" ] || [ ! -f $KIT/base/modules.txz ]; then
  log "staging node_modules (bench/device/device-kit-modules.mjs)"
  rm -rf $CACHE/stage
  KIT_TOKENIZERS=$TOKENIZERS node bench/device/device-kit-modules.mjs . $CACHE/stage >$CACHE/modules.txt
  find $CACHE/stage -type f \( -name '*.so' -o -name '*.so.*' -o -name '*.node' \) -print0 |
    while IFS= read -r -d '' f; do
      if file -b "$f" | grep -q 'ELF.*not stripped'; then strip --strip-unneeded "$f"; fi
    done
  # Identical files (each @node-llama-cpp build carries the same libggml-base and CPU variants)
  # become hard links, which tar stores once.
  python3 - "$CACHE/stage" <<'PY'
import hashlib, os, sys
seen = {}
for dp, _, fns in os.walk(sys.argv[1]):
    for fn in sorted(fns):
        p = os.path.join(dp, fn)
        if os.path.islink(p) or os.path.getsize(p) < 65536:
            continue
        h = hashlib.sha256(open(p, "rb").read()).hexdigest()
        if h in seen:
            os.unlink(p)
            os.link(seen[h], p)
        else:
            seen[h] = p
PY
  log "compressing node_modules ($(mib "$(dir_bytes $CACHE/stage)") in files): xz $MODULES_XZ (a few minutes, once)"
  tar -C $CACHE/stage --owner=0 --group=0 --sort=name -cf - node_modules |
    $NICE xz $MODULES_XZ -T2 >$KIT/base/modules.txz.tmp
  mv $KIT/base/modules.txz.tmp $KIT/base/modules.txz
  rm -rf $CACHE/stage
  echo "$key" >$CACHE/modules.key
fi

# --- 4. debs: the Vulkan loader (and glvnd) per the device README; X libs as a fallback ---------
GL_DEBS="libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2"
X_DEBS="libx11-6 libxext6 libxcb1 libxau6 libxdmcp6 libbsd0 libmd0"
if [ "$(ls .gl/*.deb 2>/dev/null | wc -l)" -lt 7 ] || [ ! -f $KIT/base/xlibs.txz ]; then
  log "downloading debs: $GL_DEBS; $X_DEBS"
  o="-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=$REPO/$CACHE/apt-lists -oAPT::Sandbox::User=root"
  mkdir -p $CACHE/apt-lists/partial $CACHE/xdebs
  apt-get $o update -qq
  rm -f .gl/*.deb $CACHE/xdebs/*.deb
  (cd .gl && apt-get $o download $GL_DEBS -qq)
  (cd $CACHE/xdebs && apt-get $o download $X_DEBS -qq)
  # Plain names (the version's ':' is written %3a).
  for f in .gl/*.deb $CACHE/xdebs/*.deb; do mv "$f" "$(dirname "$f")/$(basename "$f" | cut -d_ -f1).deb"; done
  rm -rf $CACHE/xroot && mkdir -p $CACHE/xroot
  for f in $CACHE/xdebs/*.deb; do dpkg-deb -x "$f" $CACHE/xroot; done
  tar -C $CACHE/xroot/usr/lib/x86_64-linux-gnu --owner=0 --group=0 -cf - . | xz -6 -T1 >$KIT/base/xlibs.txz
  rm -rf $CACHE/xroot $CACHE/xdebs $CACHE/apt-lists
fi

# --- 5. libggml-cuda.so ---------------------------------------------------------------------------
# patched (default): bench/device/device-kit-cuda.py keeps per fatbin only the compute_90 PTX, made ISA
#   9.0 (the prebuilt's SASS has no sm_90 and its PTX is ISA 9.1, which driver 580 cannot JIT), then
#   strip + xz: ~24 MiB, JIT-compiled for sm_90 on the device on first use.
# prebuilt: the file as npm installed it (strip + xz: ~118 MiB, three calls); it cannot run kernels
#   on an H200 with driver 580 (see device-kit-cuda.py), kept for a newer driver.
# none: no CUDA build at all (one call).
if [ "$CUDA_MODE" != none ]; then
  key="$(sha "$CUDA_SRC") $CUDA_MODE $CUDA_XZ $(sha bench/device/device-kit-cuda.py)"
  if [ "$(cat $CACHE/cuda.key 2>/dev/null)" != "$key" ] || [ ! -f $CACHE/libggml-cuda.so.xz ]; then
    src=$CUDA_SRC
    if [ "$CUDA_MODE" = patched ]; then
      command -v zstd >/dev/null || { log "zstd missing: apt-get install zstd"; exit 1; }
      log "rewriting libggml-cuda.so's fatbins to compute_90 PTX ISA 9.0 (zstd -19 of 265 MB of PTX: about two minutes on two cores, once)"
      $NICE python3 bench/device/device-kit-cuda.py "$CUDA_SRC" $CACHE/libggml-cuda.patched.so
      python3 bench/device/device-kit-cuda.py --check $CACHE/libggml-cuda.patched.so >&2
      src=$CACHE/libggml-cuda.patched.so
    fi
    log "packing libggml-cuda.so ($CUDA_MODE, $(mib "$(fsize "$src")")): strip + xz $CUDA_XZ"
    strip --strip-unneeded -o $CACHE/libggml-cuda.so "$src"
    # strip must leave what the loader maps untouched: compare every PT_LOAD segment (the ELF
    # header's section-table fields aside).
    python3 - "$src" $CACHE/libggml-cuda.so <<'PY'
import struct, sys
def loads(path):
    d = bytearray(open(path, "rb").read())
    d[0x28:0x30] = bytes(8)  # e_shoff, e_shnum, e_shstrndx: where the section headers are (not loaded)
    d[0x3c:0x40] = bytes(4)
    phoff, = struct.unpack_from("<Q", d, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", d, 0x36)
    segs = []
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, p_memsz, _ = struct.unpack_from("<IIQQQQQQ", d, phoff + i * phentsize)
        if p_type == 1:
            segs.append((p_vaddr, p_memsz, d[p_offset:p_offset + p_filesz]))
    return segs
a, b = loads(sys.argv[1]), loads(sys.argv[2])
if a != b:
    sys.exit("strip changed a loaded segment of libggml-cuda.so")
PY
    sha "$CACHE/libggml-cuda.so" >$CACHE/libggml-cuda.so.sha
    $NICE xz $CUDA_XZ -T2 -c $CACHE/libggml-cuda.so >$CACHE/libggml-cuda.so.xz.tmp
    mv $CACHE/libggml-cuda.so.xz.tmp $CACHE/libggml-cuda.so.xz
    rm -f $CACHE/libggml-cuda.so $CACHE/libggml-cuda.patched.so
    echo "$key" >$CACHE/cuda.key
  fi
fi

# --- 6. plan: how many calls, and which call carries which piece of the CUDA library ------------
TREE=$(tree_bytes)
JS=$(fsize $KIT/js/kit-js.txz)
GL=$(dir_bytes .gl)
BASE_FILES=$(($(fsize $KIT/base/node.xz) + $(fsize $KIT/base/modules.txz) + $(fsize $KIT/base/xlibs.txz) + 4096))
CUDA=0
[ "$CUDA_MODE" != none ] && CUDA=$(fsize $CACHE/libggml-cuda.so.xz)
FIRST=$((TREE + JS + GL + BASE_FILES)) # call 1 without CUDA
[ "$FIRST" -lt "$BUDGET" ] || {
  log "call 1 alone is $(mib $FIRST), over the budget $(mib $BUDGET): the working tree ($(mib "$TREE")) has grown;"
  log "move large untracked files out of it (or list them in .git/info/exclude)"
  exit 1
}
# PIECES[i-1]: the bytes of the CUDA library call i carries (0: none). Calls 2..N carry only their
# piece (the last one the js again). The cut is kept across rebuilds while every call still fits
# under 64 MiB (less 256 KiB), so that pieces already sent to a warm machine still match after a
# rebuild (e.g. of the bench code between two calls).
HARD=$((64 * 1024 * 1024 - 256 * 1024))
split_fits() { # LIMIT LEN1..LENN: does every call stay under LIMIT?
  local limit=$1 i=1 len total
  shift
  for len in "$@"; do
    if [ "$i" -eq 1 ]; then total=$((FIRST + len)); else total=$((TREE + len + (i == $# ? JS : 0))); fi
    [ "$total" -le "$limit" ] || return 1
    i=$((i + 1))
  done
}
PIECES=()
splitkey="$(cat $CACHE/cuda.key 2>/dev/null) $CUDA_MODE"
if [ "$CUDA_MODE" = none ]; then
  PIECES=(0)
elif [ -f $CACHE/cuda.split ] && [ "$(head -1 $CACHE/cuda.split)" = "$splitkey" ]; then
  read -r -a PIECES < <(sed -n 2p $CACHE/cuda.split)
  if ! split_fits "$HARD" "${PIECES[@]}"; then
    log "the working tree grew: the CUDA library is cut anew (pieces sent with the old plan no longer match)"
    PIECES=()
  fi
fi
if [ ${#PIECES[@]} -eq 0 ]; then
  N=1
  while :; do
    cap=$((BUDGET - FIRST))
    for i in $(seq 2 $N); do cap=$((cap + BUDGET - TREE - (i == N ? JS : 0))); done
    [ "$cap" -ge "$CUDA" ] && break
    N=$((N + 1))
  done
  # Spread the slack evenly: call i's piece is its room less an equal share of (cap - CUDA).
  slack=$(((cap - CUDA) / N))
  left=$CUDA
  for i in $(seq 1 $N); do
    if [ "$i" -eq 1 ]; then room=$((BUDGET - FIRST)); else room=$((BUDGET - TREE - (i == N ? JS : 0))); fi
    len=$((room - slack))
    [ "$len" -lt 0 ] && len=0
    [ "$i" -eq "$N" ] || [ "$len" -gt "$left" ] && len=$left
    PIECES+=("$len")
    left=$((left - len))
  done
  printf '%s\n%s\n' "$splitkey" "${PIECES[*]}" >$CACHE/cuda.split
fi
N=${#PIECES[@]}
declare -a PIECE
WITH_CUDA=() # the calls that carry a piece
rm -rf $KIT/cuda-*
off=0
for i in $(seq 1 $N); do
  len=${PIECES[i - 1]}
  PIECE[i]=$len
  [ "$len" -gt 0 ] || continue
  WITH_CUDA+=("$i")
  mkdir -p $KIT/cuda-$i
  dd if=$CACHE/libggml-cuda.so.xz of=$KIT/cuda-$i/part bs=1M iflag=skip_bytes,count_bytes skip=$off count="$len" status=none
  off=$((off + len))
done
[ "$off" -eq "$CUDA" ] || { log "internal error: the pieces hold $off bytes of $CUDA"; exit 1; }

{
  echo "kit $(date -u +%Y%m%dT%H%M%SZ) $(git rev-parse --short HEAD) cuda=$CUDA_MODE"
  echo "node $(sha $KIT/base/node.xz) node.xz"
  echo "modules $(sha $KIT/base/modules.txz) modules.txz"
  echo "xlibs $(sha $KIT/base/xlibs.txz) xlibs.txz"
  echo "cuda-pieces ${WITH_CUDA[*]}"
  for i in "${WITH_CUDA[@]}"; do echo "cuda-$i $(sha $KIT/cuda-$i/part) part"; done
  [ "$CUDA_MODE" != none ] && echo "cuda-lib $(cat $CACHE/libggml-cuda.so.sha) libggml-cuda.so"
} >$KIT/base/manifest.txt

# --- 7. PLAN.md ----------------------------------------------------------------------------------
{
  echo "PLAN_TREE=$TREE"
  echo "PLAN_CALLS=$N"
  for i in $(seq 1 $N); do
    if [ "$i" -eq 1 ]; then c=$((FIRST - TREE + PIECE[1])); elif [ "$i" -eq "$N" ]; then c=$((PIECE[i] + JS)); else c=${PIECE[$i]}; fi
    echo "PLAN_CARRY_$i=$c"
  done
} >$KIT/plan.env
. $KIT/plan.env

R="bash bench/device/device-run.sh"
if [ "$CUDA_MODE" = none ]; then BENCH="llamacpp --quick --json --llama-gpu vulkan --executor device-pool"; else BENCH="llamacpp --quick --json --llama-gpu cuda --executor device-pool"; fi
call_total() { local v=PLAN_CARRY_$1; echo $((TREE + ${!v})); }
call_cmd() { # the command string of call $1
  local i=$1 c=""
  if [ "$i" -eq 1 ]; then c="$R unpack-base"; fi
  if [ "${PIECE[$i]}" -gt 0 ]; then c="$c${c:+ && }$R add-cuda $i"; fi
  if [ "$i" -eq 1 ]; then c="$c && $R probe"; fi
  if [ "$i" -eq "$N" ]; then
    if [ "$CUDA_MODE" != none ] && [ "$N" -gt 1 ]; then c="$c && $R probe-cuda"; fi
    c="$c && $R gpu-check"
  fi
  echo "$c"
}
call_carry() {
  local i=$1 c=()
  [ "$i" -eq 1 ] && c+=('".devkit/base"' '".devkit/js"' '".gl"')
  [ "${PIECE[$i]}" -gt 0 ] && c+=("\".devkit/cuda-$i\"")
  [ "$i" -gt 1 ] && [ "$i" -eq "$N" ] && c+=('".devkit/js"')
  local IFS=,
  echo "[${c[*]}]" | sed 's/,/, /g'
}
call_timeout() { if [ "$1" -eq "$N" ]; then echo 600; elif [ "$1" -eq 1 ]; then echo 300; else echo 120; fi; }
{
  echo "# Device kit plan"
  echo
  echo "Built $(date -u '+%Y-%m-%d %H:%M UTC') from $(git rev-parse --short HEAD) (plus the working tree's changes) by bench/device/device-kit.sh; CUDA build: $CUDA_MODE."
  echo "Working tree sent with every call: $(mib "$TREE"). Budget per call: $(mib "$BUDGET") of the 64 MiB limit."
  echo "Check before calling (the tree may have grown): \`bash bench/device/device-kit.sh --check\`."
  echo
  if [ "$N" -gt 1 ]; then
    echo "Make the calls back to back: the machine stays warm only 30 s after each call returns, and what"
    echo "the earlier calls leave in /tmp/kit is lost when it goes cold. Every step checks what it needs and"
    echo "says \`COLD MACHINE\` (exit 3) when /tmp/kit is gone: then start again at call 1."
    echo
  fi
  for i in $(seq 1 "$N"); do
    echo "## Call $i of $N: $(mib "$(call_total "$i")") up"
    echo
    echo "- command: \`$(call_cmd "$i")\`"
    echo "- carry: \`$(call_carry "$i")\`"
    echo "- timeout_s: $(call_timeout "$i")"
    echo
  done
  cat <<TXT
Call 1 unpacks node, node_modules and the Vulkan loader (the .gl debs the image lacks) into /tmp/kit
and /, and probes, each step under \`timeout\`: nvidia-smi, the Vulkan loader and ICD, vulkaninfo,
the cu13 libraries, Dawn's adapter, bench/probes/webgpu-probe.ts --quick (onnxruntime-node's WebGPU EP
and onnxruntime-web on Dawn), node-llama-cpp with gpu false and vulkan (and cuda once assembled).
Its output is also in \$OUT/probe.log.

\`bench ARGS\` runs \`node /tmp/kit/js/bench.mjs ARGS\` (= \`npm run bench -- ARGS\`) from the repo root
with stdout+stderr in \$OUT/bench.log (appended to by a second bench in the same call) and bench/out
packed as \$OUT/bench-out.tgz. Replace the bench arguments above with what you need; several benches
can be chained with \`&&\` within the 600 s of a call. Anything that needs no CUDA can already run in
call 1 (the machine is held either way), e.g. append
\`&& $R bench llamacpp --quick --json --llama-gpu vulkan --executor device-pool\` with timeout_s 600.
\`$R exec CMD...\` runs any command in the kit's environment (node on PATH,
LD_LIBRARY_PATH with the cu13 libraries, VK_DRIVER_FILES, CUDA_CACHE_PATH), e.g.
\`$R exec node /tmp/kit/js/bench.mjs executors --quick\`.
After a change of bench code: \`bash bench/device/device-kit.sh\` (seconds) and carry .devkit/js again.
TXT
  if [ "$CUDA_MODE" = patched ]; then
    cat <<TXT

CUDA: node-llama-cpp's prebuilt libggml-cuda.so was built by CUDA 13.1 with SASS for sm_86/89/120/121
only and PTX ISA 9.1; driver 580 (CUDA 13.0) cannot JIT ISA 9.1, so unmodified it could not run one
kernel on the H200. bench/device/device-kit-cuda.py keeps only its compute_90 PTX, relabelled ISA 9.0
(all 143 modules assemble with ptxas 13.0 for sm_90). The driver JIT-compiles a module on its
first use; the cache (CUDA_CACHE_PATH=/tmp/kit/cuda-jit-cache, 4 GiB) keeps it for later processes
and calls. \`probe-cuda\` checks the library with cuobjdump, loads it, then runs a small model as
F32, F16, Q8_0 and Q4_0 GGUF in four parallel processes (\`device-probe.mjs llama-run\`): that
proves kernels run, prints the first-token times (which hold the JIT) and fills the cache for the
bench. If the JIT turns out slow (each llama-run is capped at 300 s: KIT_JIT_TIMEOUT), run the
bench in a call of its own right after (carry nothing; the tree alone travels).
TXT
  fi
  echo
  echo "Sizes: node $(mib "$(fsize $KIT/base/node.xz)"), node_modules $(mib "$(fsize $KIT/base/modules.txz)"), X libs $(mib "$(fsize $KIT/base/xlibs.txz)"), .gl debs $(mib "$GL"), js $(mib "$JS"), libggml-cuda.so.xz ($CUDA_MODE) $(mib "$CUDA") in ${#WITH_CUDA[@]} piece(s)."
} >$KIT/PLAN.md

echo
echo "device kit in $((SECONDS - T0)) s:"
printf '  %-26s %s\n' "working tree (every call)" "$(mib "$TREE")" \
  ".devkit/js/kit-js.txz" "$(mib "$JS")" \
  ".devkit/base/node.xz" "$(mib "$(fsize $KIT/base/node.xz)")" \
  ".devkit/base/modules.txz" "$(mib "$(fsize $KIT/base/modules.txz)")" \
  ".devkit/base/xlibs.txz" "$(mib "$(fsize $KIT/base/xlibs.txz)")" \
  ".gl (debs)" "$(mib "$GL")" \
  "libggml-cuda.so.xz" "$(mib "$CUDA") ($CUDA_MODE)"
for i in $(seq 1 "$N"); do
  printf '  call %d: %s (cuda piece %s)\n' "$i" "$(mib "$(call_total "$i")")" "$(mib "${PIECE[$i]}")"
done
echo "plan: $KIT/PLAN.md"
