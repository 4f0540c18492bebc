#!/usr/bin/env bash
# Installs what onnxruntime's WebGPU execution provider (Dawn, Vulkan backend) needs to run on a
# CPU-only Debian bookworm machine: Mesa's lavapipe (software Vulkan) from bookworm-backports
# (bookworm's own Mesa 22.3 is too old for Dawn) and the Vulkan loader.
# Idempotent: the backports source is added only when missing; apt skips installed packages.
# Run as root. After it, set XDG_RUNTIME_DIR (any writable dir) before starting node, e.g.
#   export XDG_RUNTIME_DIR=$(mktemp -d)
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  echo "install-webgpu-deps.sh: run as root" >&2
  exit 1
fi

. /etc/os-release
if [ "${VERSION_CODENAME:-}" != "bookworm" ]; then
  echo "install-webgpu-deps.sh: written for Debian bookworm, found ${PRETTY_NAME:-unknown}" >&2
  exit 1
fi

if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
  echo "adding bookworm-backports to /etc/apt/sources.list.d/bookworm-backports.sources"
  cat > /etc/apt/sources.list.d/bookworm-backports.sources <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# mesa-vulkan-drivers: lavapipe (llvmpipe-based Vulkan ICD); libvulkan1: the Vulkan loader Dawn
# dlopens; vulkan-tools: vulkaninfo, to check the ICD is seen.
apt-get install -y -qq --no-install-recommends -t bookworm-backports mesa-vulkan-drivers
apt-get install -y -qq --no-install-recommends libvulkan1 vulkan-tools

echo "--- installed versions"
dpkg-query -W -f='${Package} ${Version}\n' mesa-vulkan-drivers libvulkan1 vulkan-tools
ls /usr/share/vulkan/icd.d/ 2>/dev/null || true
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
if command -v vulkaninfo >/dev/null; then
  vulkaninfo --summary 2>/dev/null | grep -E "deviceName|driverName|apiVersion|driverInfo" || true
fi
