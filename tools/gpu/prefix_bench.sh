#!/usr/bin/env bash
# Runs on the GPU machine (after check.sh has unpacked build-gpu): prefix caching measured end to end on the
# full-width random model (3 dense + 5 MSA/MoE layers, --load-format dummy, the real tokenizer), as
# docs/performance.md reports it. `m3 bench serve --dataset-name agent`: conversations whose turns add 1,024
# tokens (+ 64 generated) to a 31K-token shared system prompt, so turn 2 onwards is a 1K turn on a ~32K
# conversation; against a fresh 1,024-token prompt's TTFT. Three servers:
#   on    prefix caching, a pool that holds every conversation;
#   off   --no-enable-prefix-caching (every turn recomputes the conversation);
#   host  a pool of 300 pages (38K tokens) with --kv-offloading-size: two conversations take turns (sharing
#         the system prompt), and prefix_ttft.py evict pushes a conversation out with other prompts;
#   nohost the same pool without the host tier.
# Results (JSON, logs) to $OUT; the per-turn tables are printed.
source "$(dirname "$0")/env.sh"
MODEL=/tmp/m3-random-3p5
random_model $MODEL 3+5
serve() {  # tag port flags...
  local tag=$1 port=$2
  shift 2
  $M3 serve $MODEL --device cuda --load-format dummy --port "$port" --served-model-name minimax-m3 \
    --max-model-len 40000 --max-num-seqs 16 "$@" >"$OUT/prefix_serve_$tag.log" 2>&1 &
  server=$!
  up "$port" && return 0
  echo "server $tag did not start"; tail -5 "$OUT/prefix_serve_$tag.log"; return 1
}
bench() {  # tag port flags...
  local tag=$1 port=$2
  shift 2
  $M3 bench serve --backend openai --base-url "http://127.0.0.1:$port" --model minimax-m3 --tokenizer $MODEL \
    --disable-tqdm --save-result --result-dir "$OUT" --result-filename "prefix_$tag.json" "$@" 2>&1 |
    grep -E "Mean TTFT|Median TTFT|P99 TTFT|Turn|^[0-9]+ " | head -24
}
agent() {  # tag port conversations backend
  echo "== $1: agent workload ($4), $3 conversation(s), 5 turns of 1,024 tokens on a 31,744-token system prompt"
  bench "$1_$4" "$2" --backend "$4" --dataset-name agent --agent-conversations "$3" --agent-turns 5 \
    --agent-system-len 31744 --agent-turn-len 1024 --agent-output-len 64 --max-concurrency 1
}

serve on 8131 && {
  echo "== fresh 1,024-token prompts (TTFT reference)"
  bench fresh1k 8131 --dataset-name random --random-input-len 1024 --random-output-len 1 --num-prompts 6 \
    --max-concurrency 1 --seed 7
  agent on 8131 1 openai
  agent on 8131 1 openai-chat
  echo "== TTFT sent as token ids, as text and as chat (tools/gpu/prefix_ttft.py)"
  python3 tools/gpu/prefix_ttft.py 8131
  curl -s "http://127.0.0.1:8131/metrics" | grep -E "^vllm:prefix_cache_(queries|hits)_total"
  kill -TERM $server; wait $server
}
serve off 8132 --no-enable-prefix-caching && { agent off 8132 1 openai-chat; kill -TERM $server; wait $server; }
serve host 8133 --num-kv-pages 300 --kv-offloading-size 16 && {
  grep -E "host tier|KV pool" "$OUT/prefix_serve_host.log"
  agent host 8133 2 openai-chat
  echo "== a conversation pushed out of the device pool by other traffic between its turns"
  python3 tools/gpu/prefix_ttft.py 8133 evict
  curl -s "http://127.0.0.1:8133/metrics" | grep -E "^vllm:prefix_cache_(queries|hits)_total|^m3:kv_host"
  kill -TERM $server; wait $server
}
serve nohost 8134 --num-kv-pages 300 && {
  agent nohost 8134 2 openai-chat
  python3 tools/gpu/prefix_ttft.py 8134 evict
  kill -TERM $server; wait $server
}
