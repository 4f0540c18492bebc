#!/usr/bin/env bash
# Installs Debian's Chromium for the inspector's browser test (test/inspector.browser.test.ts),
# which drives it headless through playwright-core at /usr/bin/chromium. No browser download:
# the package comes from the Debian archive like any other.
# Idempotent: does nothing when /usr/bin/chromium already runs. Run as root.
set -euo pipefail

if [ -x /usr/bin/chromium ] && /usr/bin/chromium --headless=new --no-sandbox --version >/dev/null 2>&1; then
  echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null)"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-chromium.sh: run as root" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# chromium: the browser; fonts-liberation: a sans-serif font so text has width in screenshots.
apt-get install -y -qq --no-install-recommends chromium fonts-liberation

echo "--- installed: $(/usr/bin/chromium --version 2>/dev/null)"
