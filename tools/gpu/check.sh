#!/usr/bin/env bash
# Runs on the GPU machine (see pack.sh): the GPU test suite, the MSA kernel test under compute-sanitizer, and
# `m3 generate --device cuda` on the golden fixtures; full logs go to $OUT, a short table is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/m3-gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/build-gpu/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
status=0
build-gpu/cuda_test --gtest_output=json:"$OUT/cuda_test.json" >"$OUT/cuda_test.log" 2>&1 || status=1
tail -3 "$OUT/cuda_test.log"
compute-sanitizer --tool memcheck build-gpu/cuda_test --gtest_filter='MsaSelectKernel.*:CudaGolden.TeacherForced*/m3_tiny_msa' \
  >"$OUT/sanitizer.log" 2>&1 && echo "compute-sanitizer memcheck: clean" || { echo "compute-sanitizer: FAILED"; status=1; }
tail -2 "$OUT/sanitizer.log"
for m in m3-tiny-msa m3-tiny-block128; do
  python3 - "$m" >"$OUT/in_$m.jsonl" <<'PY'
import json, sys
g = json.load(open(f"tests/fixtures/goldens/{sys.argv[1]}.json"))
for p in g["prompts"]:
    print(json.dumps({"prompt_token_ids": p["prompt_token_ids"], "max_tokens": p["max_tokens"], "temperature": 0, "ignore_eos": True}))
PY
  build-gpu/m3 generate --model "tests/fixtures/models/$m" --device cuda --input "$OUT/in_$m.jsonl" \
    --output "$OUT/out_$m.jsonl" 2>>"$OUT/generate.log" || status=1
  python3 - "$m" "$OUT/out_$m.jsonl" <<'PY'
import json, sys
g = json.load(open(f"tests/fixtures/goldens/{sys.argv[1]}.json"))
outs = [json.loads(l) for l in open(sys.argv[2])]
ok = 0
for p, o in zip(g["prompts"], outs):
    ref, got = p["output_token_ids"], o.get("output_token_ids", [])
    clear = next((i for i, s in enumerate(p["steps"]) if s["margin"] < 0.5), len(ref))
    ok += got[:clear] == ref[:clear]
print(f"m3 generate --device cuda {sys.argv[1]}: {ok}/{len(outs)} prompts match the reference greedy ids (while margin >= 0.5)")
PY
done
python3 - "$OUT/cuda_test.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{'test':70s} result")
for s in r["testsuites"]:
    for t in s["testsuite"]:
        res = "SKIP" if t.get("result") == "SKIPPED" else ("FAIL" if t.get("failures") else "ok")
        extra = {k: v for k, v in t.items() if k.startswith(("worst", "decode"))}
        print(f"{s['name'] + '.' + t['name']:70s} {res} {extra if extra else ''}")
print(f"tests: {r['tests']}, failures: {r['failures']}")
PY
exit $status
