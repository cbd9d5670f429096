#!/usr/bin/env bash
# Runs on the GPU machine (after check.sh has unpacked build-gpu): what structured output costs, as
# docs/performance.md reports it.
#  1. m3 bench grammar at the real vocabulary on this machine's cores: compile times and mask times per token
#     and per batch step (B = 1, 64) for any JSON object, Claude Code's tool schemas and its tool-call markup.
#  2. TPOT with and without a grammar on the full-width random model (3 dense + 5 MSA/MoE layers, dummy
#     weights): m3 bench serve, random 1,024-token prompts, 256 tokens out, at concurrency 1 and 64; the
#     grammar requests send response_format json_object (their structure may end early: TPOT is per token).
#     The server's m3:structured_output_* counters say how much mask time the steps waited for.
source "$(dirname "$0")/env.sh"
echo "== m3 bench grammar ($(nproc) cores)"
$M3 bench grammar --tokenizer tests/fixtures/minimax-m3/tokenizer.json --tools tests/fixtures/claude_code/session.json \
  --batch-sizes 1 64 --steps 64 --result-json "$OUT/grammar_bench.json"
MODEL=/tmp/m3-random-3p5
random_model $MODEL 3+5
$M3 serve $MODEL --device cuda --load-format dummy --port 8141 --served-model-name minimax-m3 --max-model-len 4096 \
  --max-num-seqs 64 >"$OUT/grammar_serve.log" 2>&1 &
server=$!
up 8141 $server
bench() {  # tag concurrency prompts [extra body]
  local body=${4:-'{}'}
  echo "== $1: concurrency $2, body $body"
  $M3 bench serve --backend openai --base-url http://127.0.0.1:8141 --model minimax-m3 --tokenizer $MODEL \
    --dataset-name random --random-input-len 1024 --random-output-len 256 --num-prompts "$3" --max-concurrency "$2" \
    --seed 3 --disable-tqdm --save-result --result-dir "$OUT" --result-filename "grammar_$1.json" \
    --extra-body "$body" 2>&1 | grep -E "Mean TPOT|Median TPOT|P99 TPOT|Mean TTFT|Output token throughput|Total generated"
  curl -s http://127.0.0.1:8141/metrics | grep -E "^m3:structured_output"
}
bench c1_free 1 6
bench c1_json 1 6 '{"response_format": {"type": "json_object"}}'
bench c64_free 64 128
bench c64_json 64 128 '{"response_format": {"type": "json_object"}}'
kill -TERM $server; wait $server
