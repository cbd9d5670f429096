#!/usr/bin/env bash
# Requests/s and latency of the HTTP front end: GET /health and a 1-token completion on the tiny model, at 1, 64
# and 1,024 connections, with wrk (Debian package `wrk`). Usage: tools/http/front_bench.sh [M3_BINARY] [SECONDS]
# Prints one line per case: endpoint, connections, requests/s, p50 / p99 latency (ms), non-2xx + socket errors.
set -euo pipefail
M3=${1:-build/m3}
SECONDS_PER_CASE=${2:-10}
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 1; }
SERVER= LUA=
MODEL=$(mktemp -d)
trap '[ -n "$SERVER" ] && { kill $SERVER; wait $SERVER; } 2>/dev/null; rm -rf "$MODEL" ${LUA:+"$LUA"}' EXIT
"$M3" make-random-model --preset tiny --out "$MODEL" --tokenizer-from tests/fixtures/minimax-m3 >/dev/null 2>&1
PORT=$((20000 + RANDOM % 20000))
M3_LOG_LEVEL=warn OMP_WAIT_POLICY=PASSIVE "$M3" serve "$MODEL" --host 127.0.0.1 --port "$PORT" --served-model-name m \
  --disable-log-stats --max-num-seqs 256 >/dev/null 2>&1 &
SERVER=$!
for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
LUA=$(mktemp -d)
cat >"$LUA/report.lua" <<'LUA'
done = function(summary, latency, requests)
  io.write(string.format("RESULT %.0f %.2f %.2f %d\n", summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
LUA
{
  echo 'wrk.method = "POST"'
  echo 'wrk.headers["Content-Type"] = "application/json"'
  echo "wrk.body = '{\"model\": \"m\", \"prompt\": [1, 2, 3, 4], \"max_tokens\": 1}'"
  cat "$LUA/report.lua"
} >"$LUA/completion.lua"
printf "%-16s %6s %10s %9s %9s %7s\n" endpoint conns "req/s" "p50 ms" "p99 ms" errors
for path in /health /v1/completions; do
  script=$LUA/report.lua
  [ "$path" = /v1/completions ] && script=$LUA/completion.lua
  for c in 1 64 1024; do
    threads=$((c < 2 ? 1 : 2))
    line=$(wrk -t "$threads" -c "$c" -d "${SECONDS_PER_CASE}s" --timeout 30s -s "$script" "http://127.0.0.1:$PORT$path" 2>&1 |
      grep '^RESULT' || echo "RESULT - - - failed")
    read -r _ rps p50 p99 errs <<<"$line"
    printf "%-16s %6s %10s %9s %9s %7s\n" "$path" "$c" "$rps" "$p50" "$p99" "$errs"
  done
done
