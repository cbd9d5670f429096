#!/usr/bin/env bash
# Runs on the GPU machine (see pack.sh) with `run(carry=["build-gpu"])`: `check.sh [tests] [e2e] [bench] ...`
# (default: tests). tests: the GPU test suite, compute-sanitizer memcheck on the kernel tests, and
# `m3 generate --device cuda` on the golden fixtures. e2e: the server e2e suite with every model-backed server
# on --device cuda (needs pack.sh's M3_PACK_NODE=1; E2E_SUITES picks suites, E2E_ARGS adds serve flags such as
# "--tensor-parallel-size 4"). bench: m3-kernel-bench (all benches, or BENCH_FILTER).
# fp8: MXFP8 fixtures through `m3 generate --device cuda` (FP8 weights on the GPU) against transformers' goldens,
# (FIXTURES="name ..." first writes those goldens with tools/goldens/make_goldens.py, uses them and leaves them
# in $OUT/fixtures.tar.gz). The CUDA FP8 path against the CPU reference is in cuda_test (CudaVsCpu.*Fp8*).
# kv: the FP8 KV cache: its GPU tests (kernels, CUDA vs the CPU reference), transformers bf16 vs fp32 on long prompts
# (tools/goldens/precision_drift.py) and m3serve's FP8 vs bf16 KV on the same prompts (KvPrecision), and
# `m3 generate --kv-cache-dtype fp8` on the golden fixtures.
# prefix: prefix caching on --device cuda: the same 2,000-token prompt twice to one server (cached_tokens, same
# greedy text), and once to a --no-enable-prefix-caching server (same text), on the synthetic tiny model.
# tp: tensor parallel over the machine's GPUs (2 or more): `m3 generate --tensor-parallel-size N` on the golden
# fixtures against TP 1, a TP-N server answering as a TP-1 server does, and a killed rank ending the server.
# EP=1 adds --enable-expert-parallel; DEP=1 runs --data-parallel-size N --enable-expert-parallel instead;
# PLACEMENT=FILE adds --expert-placement FILE. placement (2+ GPUs): `m3 generate --expert-placement` with a skewed
# histogram at TP 2 + EP and DEP 2 on m3-tiny-msa against the reference.
# Full logs go to $OUT; short tables are printed.
source "$(dirname "$0")/env.sh"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
status=0
want() { [ $# -eq 0 ] && return 0; local w; for w in "${MODES[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1; }
MODES=("$@")
[ ${#MODES[@]} -eq 0 ] && MODES=(tests)

# Golden fixture NAME -> JSONL requests of its prompts (greedy, the reference's lengths).
golden_prompts() {
  python3 - "$1" <<'PY'
import json, sys
g = json.load(open(f"tests/fixtures/goldens/{sys.argv[1]}.json"))
for p in g["prompts"]:
    print(json.dumps({"prompt_token_ids": p["prompt_token_ids"], "max_tokens": p["max_tokens"], "temperature": 0, "ignore_eos": True}))
PY
}
# golden_check NAME OUT.jsonl LABEL: how many prompts of `m3 generate`'s output match the reference's greedy ids
# while its top-1 / top-2 margin is at least 0.5 (bf16 activations on the GPU may flip closer calls).
golden_check() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
g = json.load(open(f"tests/fixtures/goldens/{sys.argv[1]}.json"))
outs = [json.loads(l) for l in open(sys.argv[2])]
ok = 0
for p, o in zip(g["prompts"], outs):
    ref, got = p["output_token_ids"], o.get("output_token_ids", [])
    clear = next((i for i, s in enumerate(p["steps"]) if s["margin"] < 0.5), len(ref))
    ok += got[:clear] == ref[:clear]
print(f"{sys.argv[3]}: {ok}/{len(outs)} prompts match the reference greedy ids (while margin >= 0.5)")
PY
}

# NCCL is loaded at run time: the device image has it with PyTorch.
if [ -z "${M3_NCCL_LIBRARY:-}" ]; then
  M3_NCCL_LIBRARY=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null ||
                    find / -name libnccl.so.2 -not -path '/proc/*' 2>/dev/null | head -1)
  export M3_NCCL_LIBRARY
fi
echo "NCCL: ${M3_NCCL_LIBRARY:-not found}"

if want tp; then
  GPUS=$(nvidia-smi -L | wc -l)
  TP=${TP:-$GPUS}
  EPF=${EP:+--enable-expert-parallel}  # EP=1: the experts split by expert (whole experts per rank)
  PAR="--tensor-parallel-size $TP $EPF"
  [ -n "${DEP:-}" ] && PAR="--data-parallel-size $TP --enable-expert-parallel"  # DEP=1: data-parallel attention
  [ -n "${PLACEMENT:-}" ] && PAR="$PAR --expert-placement $PLACEMENT"  # a routing histogram (EP / DEP)
  echo "== $PAR over $GPUS GPU(s)"
  for m in m3-tiny-msa m3-tiny-block128 m3-tiny-hf-sharded; do
    golden_prompts "$m" >"$OUT/tp_in_$m.jsonl"
    for t in 1 "$TP"; do
      timeout 300 build-gpu/bin/m3 generate --model "tests/fixtures/models/$m" --device cuda \
        $([ "$t" != 1 ] && echo "$PAR") --input "$OUT/tp_in_$m.jsonl" --output "$OUT/tp_out_${m}_$t.jsonl" 2>"$OUT/tp_generate_${m}_$t.log" ||
        { echo "m3 generate --tensor-parallel-size $t $m: FAILED"; tail -5 "$OUT/tp_generate_${m}_$t.log"; status=1; }
    done
    grep -h "pages)\|NCCL" "$OUT/tp_generate_${m}_$TP.log" | sed 's/^/  /'
    python3 - "$m" "$OUT/tp_out_${m}_1.jsonl" "$OUT/tp_out_${m}_$TP.jsonl" "$PAR" <<'PY'
import json, sys
g = json.load(open(f"tests/fixtures/goldens/{sys.argv[1]}.json"))
one = [json.loads(l) for l in open(sys.argv[2])]
many = [json.loads(l) for l in open(sys.argv[3])]
ok = same = 0
for p, a, b in zip(g["prompts"], one, many):
    ref, got = p["output_token_ids"], b.get("output_token_ids", [])
    clear = next((i for i, s in enumerate(p["steps"]) if s["margin"] < 0.5), len(ref))
    ok += got[:clear] == ref[:clear]
    same += a.get("output_token_ids") == got
print(f"m3 generate --device cuda {sys.argv[4]} {sys.argv[1]}: {ok}/{len(many)} match the "
      f"reference greedy ids (margin >= 0.5); {same}/{len(many)} identical to TP 1")
PY
  done
  build-gpu/bin/m3 make-random-model --preset tiny --out /tmp/m3-tiny --tokenizer-from tests/fixtures/minimax-m3 2>/dev/null
  ask() {  # port -> the chat completion's message content (greedy)
    curl -s "localhost:$1/v1/chat/completions" -H 'content-type: application/json' \
      -d '{"model":"m","messages":[{"role":"user","content":"Write a haiku about GPUs"}],"max_tokens":48,"temperature":0,"ignore_eos":true}' |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["message"])'
  }
  # One server at a time: each sizes its KV pool from the free memory of its GPUs.
  build-gpu/bin/m3 serve /tmp/m3-tiny --device cuda --port 8301 --served-model-name m >"$OUT/tp_serve_1.log" 2>&1 &
  S1=$!
  up 8301 "$S1" && A=$(ask 8301)
  kill "$S1"; wait "$S1"
  build-gpu/bin/m3 serve /tmp/m3-tiny --device cuda $PAR --port 8302 --served-model-name m \
    >"$OUT/tp_serve_$TP.log" 2>&1 &
  SN=$!
  if up 8302 "$SN"; then
    B=$(ask 8302)
    [ "$A" = "$B" ] && echo "m3 serve $PAR: same greedy answer as TP 1" ||
      { echo "m3 serve $PAR: answer differs from TP 1"; echo "  TP1: $A"; echo "  TP$TP: $B"; }
    W=$(grep -o "rank 1 of $TP on [^ ]* (pid [0-9]*)" "$OUT/tp_serve_$TP.log" | grep -o "pid [0-9]*" | cut -d' ' -f2)
    kill -9 "$W"; t0=$(date +%s.%N)
    wait "$SN"; rc=$?
    echo "killed rank 1 (pid $W): the server exited with status $rc after $(python3 -c "print(round($(date +%s.%N)-$t0,2))") s"
    [ "$rc" != 0 ] || status=1
  else
    echo "TP servers did not come up"; tail -20 "$OUT/tp_serve_$TP.log"; status=1
  fi
  grep -h "NCCL\|pages)\|error" "$OUT/tp_serve_$TP.log" | head -8 | sed 's/^/  /'
fi

if want placement; then  # --expert-placement from a skewed histogram (experts 0-3 hot) at TP 2 + EP and DEP 2
  echo '{"expert_tokens": [900, 800, 700, 600, 5, 4, 3, 2]}' >"$OUT/expert_loads.json"
  golden_prompts m3-tiny-msa >"$OUT/place_in.jsonl"
  for par in "--tensor-parallel-size 2 --enable-expert-parallel" "--data-parallel-size 2 --enable-expert-parallel"; do
    timeout 200 build-gpu/bin/m3 generate --model tests/fixtures/models/m3-tiny-msa --device cuda $par \
      --expert-placement "$OUT/expert_loads.json" --input "$OUT/place_in.jsonl" --output "$OUT/place_out.jsonl" \
      2>"$OUT/place.log" || { echo "m3 generate $par --expert-placement: FAILED"; tail -5 "$OUT/place.log"; status=1; }
    grep -m1 -o "expert placement from .*" "$OUT/place.log"
    golden_check m3-tiny-msa "$OUT/place_out.jsonl" "m3 generate --device cuda $par --expert-placement (skewed)"
  done
fi

if want fp8; then
  if [ -n "${FIXTURES:-}" ]; then  # new golden fixtures from transformers, used below and brought back in $OUT
    fx=/tmp/m3-new-fixtures
    rm -rf "$fx" && python3 tools/goldens/make_goldens.py "$fx" $FIXTURES >"$OUT/make_goldens.log" 2>&1 ||
      { echo "make_goldens: FAILED"; tail -20 "$OUT/make_goldens.log"; status=1; }
    cp -r "$fx"/models/* tests/fixtures/models/ && cp -r "$fx"/goldens/* tests/fixtures/goldens/
    tar -C "$fx" -czf "$OUT/fixtures.tar.gz" models goldens  # one file: $OUT brings back a limited count
    grep "==\|min margin" "$OUT/make_goldens.log"
  fi
  for m in m3-tiny-mxfp8 m3-tiny-mxfp8-block128; do
    [ -f "tests/fixtures/goldens/$m.json" ] || { echo "fp8: no fixture $m"; continue; }
    golden_prompts "$m" >"$OUT/fp8_in_$m.jsonl"
    timeout 300 build-gpu/bin/m3 generate --model "tests/fixtures/models/$m" --device cuda --input "$OUT/fp8_in_$m.jsonl" \
      --output "$OUT/fp8_out_$m.jsonl" 2>"$OUT/fp8_generate_$m.log" || { echo "generate $m: FAILED"; status=1; }
    grep -h "linear weights" "$OUT/fp8_generate_$m.log" | sed 's/^/  /'
    golden_check "$m" "$OUT/fp8_out_$m.jsonl" "m3 generate --device cuda $m (MXFP8 on the GPU)"
  done
fi

if want kv; then
  build-gpu/bin/cuda_test --gtest_filter='*fp8*:*Fp8Kv*:*PrepareHeads*' >"$OUT/kv_tests.log" 2>&1 || status=1
  grep -E "^\[  FAILED|PASSED|tests ran" "$OUT/kv_tests.log" | sort -u | tail -14
  grep -A3 "Failure" "$OUT/kv_tests.log" | grep -v "worst err/row_max" | head -12
  grep "_fp8 splits" "$OUT/kv_tests.log" | grep -v " 0 elements over 2e-2, 0 NaN" | cut -c1-400 | head -6
  python3 tools/goldens/precision_drift.py "$OUT/precision_drift.json" >"$OUT/precision_drift.log" 2>&1 ||
    { echo "precision_drift: FAILED"; tail -20 "$OUT/precision_drift.log"; status=1; }
  grep -v "^$" "$OUT/precision_drift.log" | tail -12
  M3_PRECISION_DRIFT_JSON="$OUT/precision_drift.json" build-gpu/bin/cuda_test --gtest_filter='KvPrecision.*' \
    >"$OUT/kv_precision.log" 2>&1 || status=1
  grep -E "KV \(m3serve\)|OK|FAILED|Failure|Expected|Which is" "$OUT/kv_precision.log" | head -20
  for m in m3-tiny-msa m3-tiny-block128 m3-tiny-mxfp8-block128; do
    golden_prompts "$m" >"$OUT/kv_in_$m.jsonl"
    timeout 300 build-gpu/bin/m3 generate --model "tests/fixtures/models/$m" --device cuda --kv-cache-dtype fp8 \
      --input "$OUT/kv_in_$m.jsonl" --output "$OUT/kv_out_$m.jsonl" 2>"$OUT/kv_generate_$m.log" ||
      { echo "generate --kv-cache-dtype fp8 $m: FAILED"; tail -3 "$OUT/kv_generate_$m.log"; status=1; }
    grep -h "KV pool" "$OUT/kv_generate_$m.log" | sed 's/^/  /'
    golden_check "$m" "$OUT/kv_out_$m.jsonl" "m3 generate --device cuda --kv-cache-dtype fp8 $m"
  done
fi

if want prefix; then
  build-gpu/bin/m3 make-random-model --preset tiny --out /tmp/m3-tiny-prefix --tokenizer-from tests/fixtures/minimax-m3 2>/dev/null
  ask() {  # port -> "cached_tokens text" of a greedy completion of the fixed prompt
    python3 - "$1" <<'PY'
import json, sys, urllib.request
prompt = [3 + (i * 37) % 150 for i in range(2000)]
body = {"model": "m", "prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True}
req = urllib.request.Request(f"http://localhost:{sys.argv[1]}/v1/completions", json.dumps(body).encode(),
                             {"content-type": "application/json"})
r = json.load(urllib.request.urlopen(req))
print(r["usage"]["prompt_tokens_details"]["cached_tokens"], json.dumps(r["choices"][0]["text"]))
PY
  }
  build-gpu/bin/m3 serve /tmp/m3-tiny-prefix --device cuda --port 8401 --served-model-name m >"$OUT/prefix_on.log" 2>&1 &
  P1=$!
  up 8401 && A=$(ask 8401) && B=$(ask 8401)
  kill "$P1"; wait "$P1"
  build-gpu/bin/m3 serve /tmp/m3-tiny-prefix --device cuda --port 8402 --served-model-name m --no-enable-prefix-caching \
    >"$OUT/prefix_off.log" 2>&1 &
  P2=$!
  up 8402 && C=$(ask 8402)
  kill "$P2"; wait "$P2"
  echo "prefix caching on --device cuda: first (cached_tokens text): $A"
  echo "                                 again: $B"
  echo "                   without the cache: $C"
  [ "${A#* }" = "${B#* }" ] && [ "${A#* }" = "${C#* }" ] && [ "${B%% *}" -gt 0 ] && echo "prefix: same text, tokens reused" ||
    { echo "prefix: MISMATCH"; status=1; }
fi

if want tests; then
  build-gpu/bin/cuda_test --gtest_output=json:"$OUT/cuda_test.json" >"$OUT/cuda_test.log" 2>&1 || status=1
  tail -3 "$OUT/cuda_test.log"
  compute-sanitizer --tool memcheck --error-exitcode 1 build-gpu/bin/cuda_test \
    --gtest_filter='*MsaSelectKernel*:*MsaScore*:*AttentionKernel*:*Moe*:*Sampling*:*PrepareHeads*:*Fp8*:*LinearGemv*:CudaGolden.TeacherForced*/m3_tiny_msa:CudaGolden.TeacherForced*/m3_tiny_mxfp8:-CudaVsCpu.*' \
    >"$OUT/sanitizer.log" 2>&1 && echo "compute-sanitizer memcheck: clean" || { echo "compute-sanitizer: FAILED"; status=1; }
  tail -2 "$OUT/sanitizer.log"
  # Barrier misuse gates; racecheck is reported, not gated: it flags the MSA decode scorer's cp.async.bulk ring,
  # whose slots are ordered by mbarriers that racecheck does not model (docs/performance.md).
  compute-sanitizer --tool synccheck --error-exitcode 1 build-gpu/bin/cuda_test --gtest_filter='*Msa*:*AttentionKernel*:*Moe*:*PrepareHeads*:*Sampling*:-*SameIds*' \
    >"$OUT/synccheck.log" 2>&1 && echo "compute-sanitizer synccheck: clean" || { echo "compute-sanitizer synccheck: FAILED"; status=1; }
  compute-sanitizer --tool racecheck build-gpu/bin/cuda_test --gtest_filter='*Msa*:*AttentionKernel*:*Moe*:*PrepareHeads*:*Sampling*:-*SameIds*' >"$OUT/racecheck.log" 2>&1
  echo "compute-sanitizer racecheck: $(grep -c 'Race reported' "$OUT/racecheck.log") reports, in: $(grep -o 'Write access at void [^(]*' "$OUT/racecheck.log" | sed 's/.*:://; s/<$//' | sort -u | tr '\n' ' ')"
  for m in m3-tiny-msa m3-tiny-block128; do
    golden_prompts "$m" >"$OUT/in_$m.jsonl"
    build-gpu/bin/m3 generate --model "tests/fixtures/models/$m" --device cuda --input "$OUT/in_$m.jsonl" \
      --output "$OUT/out_$m.jsonl" 2>>"$OUT/generate.log" || status=1
    golden_check "$m" "$OUT/out_$m.jsonl" "m3 generate --device cuda $m"
  done
  python3 - "$OUT/cuda_test.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for s in r["testsuites"]:
    for t in s["testsuite"]:
        res = "SKIP" if t.get("result") == "SKIPPED" else ("FAIL" if t.get("failures") else "ok")
        extra = {k: v for k, v in t.items() if k.startswith(("worst", "decode"))}
        if res != "ok" or extra:
            print(f"{s['name'] + '.' + t['name']:70s} {res} {extra if extra else ''}")
print(f"gpu tests: {r['tests']}, failures: {r['failures']}")
PY
fi

if want e2e; then
  mkdir -p /tmp/m3-node
  xz -dc build-gpu/node/node.xz >/tmp/m3-node/node && chmod +x /tmp/m3-node/node
  tar -C tests/e2e/server -xJf build-gpu/node/node_modules.tar.xz
  for suite in ${E2E_SUITES:-openai anthropic bad_input load drain scripted}; do
    (cd tests/e2e/server && M3_BINARY="$PWD/../../../build-gpu/bin/m3" M3_REPO_ROOT="$PWD/../../.." \
       M3_E2E_WORKDIR=/tmp/m3-e2e M3_E2E_SERVE_ARGS="--device cuda ${E2E_ARGS:-}" \
       timeout 500 /tmp/m3-node/node --test --test-reporter=spec "$suite.test.mjs" >"$OUT/e2e_$suite.log" 2>&1) \
      && echo "e2e $suite (--device cuda ${E2E_ARGS:-}): $(grep -E "^ℹ (tests|pass|fail) " "$OUT/e2e_$suite.log" | tr "\n" " ")" \
      || { echo "e2e $suite (--device cuda): FAILED"; grep -E '^✖|Error' "$OUT/e2e_$suite.log" | head -5; status=1; }
  done
fi

if want profile; then  # where a decode step's time goes (nsys kernel summary), PROFILE_FILTER picks the step
  filter=${PROFILE_FILTER:-decode_step B=1 }
  if command -v nsys >/dev/null; then
    nsys profile -o "$OUT/step" --force-overwrite true build-gpu/bin/m3-kernel-bench --filter "$filter" --iters 5 \
      >"$OUT/profile_run.log" 2>&1
    nsys stats --report cuda_gpu_kern_sum --format csv "$OUT/step.nsys-rep" >"$OUT/kernels.csv" 2>/dev/null
    python3 - "$OUT/kernels.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 8]
head, body = rows[0], rows[1:]
ti, ni, ci = head.index("Total Time (ns)"), head.index("Name"), head.index("Instances")
total = sum(float(r[ti]) for r in body)
print(f"profile ({sys.argv[1]}): {total/1e6:.1f} ms of kernel time")
for r in sorted(body, key=lambda r: -float(r[ti]))[:25]:
    print(f"{float(r[ti])/total*100:5.1f}%  {float(r[ti])/1e3/int(r[ci]):9.1f} us x{int(r[ci]):5d}  {r[ni][:110]}")
PY
  else  # ncu: every kernel of the run replayed once for its duration (synthetic-weight fills excluded)
    ncu --metrics gpu__time_duration.sum --csv --kernel-name regex:'^(?!fill_random)' \
      build-gpu/bin/m3-kernel-bench --filter "$filter" --iters 1 >"$OUT/ncu.csv" 2>"$OUT/ncu.log"
    python3 - "$OUT/ncu.csv" <<'PY'
import csv, sys, collections
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
rows = list(csv.DictReader(lines))
agg = collections.defaultdict(lambda: [0.0, 0])
for r in rows:
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    v = float(r["Metric Value"].replace(",", ""))
    v = v / 1000 if r.get("Metric Unit") == "nsecond" else v  # -> us
    agg[r["Kernel Name"][:100]][0] += v
    agg[r["Kernel Name"][:100]][1] += 1
total = sum(v for v, n in agg.values())
print(f"ncu: {len(rows)} kernel launches, {total:.0f} us of kernel time (all profiled steps together)")
for name, (v, n) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:30]:
    print(f"{v/total*100:5.1f}%  {v/n:9.1f} us x{n:4d}  {name}")
PY
  fi
fi

if want bench; then
  build-gpu/bin/m3-kernel-bench ${BENCH_FILTER:+--filter "$BENCH_FILTER"} ${BENCH_ARGS:-} --json "$OUT/bench.json" \
    2>&1 | tee "$OUT/bench.log" || status=1
fi
exit $status
