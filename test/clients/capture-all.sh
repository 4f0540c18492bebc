#!/usr/bin/env bash
# Captures what each CLI sends (two sessions each, see capture.sh) and rewrites
# test/clients/fixtures/<cli>-<version>.json from the logs. Logs stay in $OUT (default /tmp/agent-edge-capture).
#
#   npm ci --prefix test/clients --no-audit --no-fund && test/clients/capture-all.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
OUT=${OUT:-/tmp/agent-edge-capture}
mkdir -p "$OUT" "$here/fixtures"
port=${PORT:-8790}
version() { node -p "require('$here/node_modules/$1/package.json').version"; }

declare -A PKG=([claude]=@anthropic-ai/claude-code [codex]=@openai/codex [opencode]=opencode-ai [qwen]=@qwen-code/qwen-code)
declare -A NAME=([claude]=claude-code [codex]=codex [opencode]=opencode [qwen]=qwen-code)
B='http://127.0.0.1:8787'
declare -A SETUP=(
  [claude]='{"command":"claude -p \"<prompt>\"","env":{"ANTHROPIC_BASE_URL":"'$B'","ANTHROPIC_API_KEY":"sk-local-dev","DISABLE_TELEMETRY":"1","CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC":"1","DISABLE_AUTOUPDATER":"1"},"config":null}'
  [codex]='{"command":"codex exec \"<prompt>\" (in a git repository: outside one codex exec needs --skip-git-repo-check)","env":{"CODEX_API_KEY":"sk-local-dev","CODEX_HOME":"<optional; default ~/.codex>"},"config":{"path":"$CODEX_HOME/config.toml","text":"openai_base_url = \"'$B'/v1\"\ncheck_for_update_on_startup = false\n\n[analytics]\nenabled = false\n"}}'
  [opencode]='{"command":"opencode run \"<prompt>\"","env":{"OPENCODE_DISABLE_AUTOUPDATE":"1","OPENCODE_DISABLE_MODELS_FETCH":"1"},"config":{"path":"~/.config/opencode/opencode.json","text":"{\"$schema\":\"https://opencode.ai/config.json\",\"provider\":{\"agent-edge\":{\"npm\":\"@ai-sdk/openai-compatible\",\"options\":{\"baseURL\":\"'$B'/v1\",\"apiKey\":\"sk-local-dev\"},\"models\":{\"default\":{}}}},\"model\":\"agent-edge/default\"}"}}'
  [qwen]='{"command":"qwen -p \"<prompt>\"","env":{"OPENAI_BASE_URL":"'$B'/v1","OPENAI_API_KEY":"sk-local-dev"},"config":{"path":"~/.qwen/settings.json","text":"{\"security\":{\"auth\":{\"selectedType\":\"openai\"}},\"privacy\":{\"usageStatisticsEnabled\":false}}"}}'
)

for cli in ${CLIS:-claude codex opencode qwen}; do
  log=$OUT/$cli.jsonl
  rm -f "$log"
  node --import tsx "$here/capture-server.ts" --port "$port" --log "$log" >"$OUT/$cli.server.log" 2>&1 &
  srv=$!
  for _ in $(seq 50); do grep -q "capture server on" "$OUT/$cli.server.log" && break; sleep 0.2; done
  grep -q "capture server on" "$OUT/$cli.server.log" || { cat "$OUT/$cli.server.log" >&2; exit 1; }
  echo "== $cli"
  "$here/capture.sh" "$cli" "http://127.0.0.1:$port" | tee "$OUT/$cli.runs.txt"
  kill "$srv"
  wait "$srv" 2>/dev/null || true
  v=$(version "${PKG[$cli]}")
  (cd "$root" && node --import tsx "$here/make-fixture.ts" --cli "${NAME[$cli]}" --version "$v" --log "$log" --setup "${SETUP[$cli]}" --out "$here/fixtures/${NAME[$cli]}-$v.json")
  port=$((port + 1))
done
