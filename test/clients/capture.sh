#!/usr/bin/env bash
# Runs one coding-agent CLI twice (two sessions, same working folder) against a base URL, in
# its default configuration: a throwaway HOME / XDG folders, only the base URL, the key and the
# telemetry / update switches set (and, for OpenCode and Codex, the minimal config file that names
# the provider). Used with capture-server.ts to record what each CLI sends (docs/clients.md).
#
#   npx tsx test/clients/capture-server.ts --port 8790 --log /tmp/cap/claude.jsonl &
#   test/clients/capture.sh claude http://127.0.0.1:8790
#
# Prints the temp folder it used; the CLIs' own output goes to <tmp>/run-<n>.out / .err.
set -u
cli=$1
base=$2 # e.g. http://127.0.0.1:8790 (no /v1)
prompt=${3:-"List the files in this folder, then say done."}
prompt2=${4:-$prompt} # the second session's prompt
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/node_modules/.bin
tmp=$(mktemp -d /tmp/agent-edge-cli-$cli-XXXXXX)
home=$tmp/home
work=$tmp/work
mkdir -p "$home" "$work"
printf '# Scratch\n\nA file for the CLI to read.\n' >"$work/README.md"
git -C "$work" init -q && git -C "$work" -c user.email=t@t -c user.name=t add -A && git -C "$work" -c user.email=t@t -c user.name=t commit -qm init
KEY=sk-local-dev

common=(PATH="$(dirname "$(command -v node)"):/usr/bin:/bin" HOME="$home" USER=tester TERM=dumb LANG=C.UTF-8
  XDG_CONFIG_HOME="$home/.config" XDG_DATA_HOME="$home/.local/share" XDG_CACHE_HOME="$home/.cache" XDG_STATE_HOME="$home/.local/state")

case $cli in
claude)
  envs=(ANTHROPIC_BASE_URL="$base" ANTHROPIC_API_KEY=$KEY DISABLE_TELEMETRY=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1)
  cmd=("$bin/claude" -p "$prompt")
  ;;
codex)
  mkdir -p "$home/.codex"
  printf 'openai_base_url = "%s/v1"\ncheck_for_update_on_startup = false\n\n[analytics]\nenabled = false\n' "$base" >"$home/.codex/config.toml"
  envs=(CODEX_HOME="$home/.codex" CODEX_API_KEY=$KEY)
  cmd=("$bin/codex" exec "$prompt")
  ;;
opencode)
  mkdir -p "$home/.config/opencode"
  cat >"$home/.config/opencode/opencode.json" <<JSON
{
  "\$schema": "https://opencode.ai/config.json",
  "provider": {
    "agent-edge": {
      "npm": "@ai-sdk/openai-compatible",
      "options": { "baseURL": "$base/v1", "apiKey": "$KEY" },
      "models": { "default": {} }
    }
  },
  "model": "agent-edge/default"
}
JSON
  envs=(OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1)
  cmd=("$bin/opencode" run "$prompt")
  ;;
qwen)
  mkdir -p "$home/.qwen"
  printf '{ "security": { "auth": { "selectedType": "openai" } }, "privacy": { "usageStatisticsEnabled": false } }\n' >"$home/.qwen/settings.json"
  envs=(OPENAI_BASE_URL="$base/v1" OPENAI_API_KEY=$KEY)
  cmd=("$bin/qwen" -p "$prompt")
  ;;
*)
  echo "unknown cli $cli" >&2
  exit 2
  ;;
esac
# Extra env from the caller (CAPTURE_ENV="A=1 B=2") and extra setup (CAPTURE_SETUP, sourced).
if [ -n "${CAPTURE_SETUP:-}" ]; then . "$CAPTURE_SETUP"; fi
# shellcheck disable=SC2206
extra=(${CAPTURE_ENV:-})

for n in 1 2; do
  [ "$n" = 2 ] && cmd=("${cmd[@]/#$prompt/$prompt2}")
  start=$(date +%s.%N)
  (cd "$work" && env -i "${common[@]}" "${envs[@]}" "${extra[@]}" timeout -k 5 ${CAPTURE_TIMEOUT:-120} "${cmd[@]}" </dev/null >"$tmp/run-$n.out" 2>"$tmp/run-$n.err")
  rc=$?
  end=$(date +%s.%N)
  echo "run $n: rc=$rc $(echo "$end - $start" | bc) s; out: $(head -c 300 "$tmp/run-$n.out" | tr '\n' ' ') err: $(tail -c 400 "$tmp/run-$n.err" | tr '\n' ' ')"
done
echo "$tmp"
