#!/usr/bin/env bash
# The GPU check, run from the unpacked GPU kit (tools/gpu_kit.sh builds it here; docs/cuda_backend.md):
# nothing is built, nothing is fetched.
#
#   kiln-gpu/gpu_check.sh tests   # <= 5 min on one H200
#   kiln-gpu/gpu_check.sh bench   # <= 5 min
#   kiln-gpu/gpu_check.sh e2e     # <= 5 min: ResNet-50 from JPEG files, kiln against PyTorch's DataLoader
#   kiln-gpu/gpu_check.sh all     # tests, bench and e2e, one after the other
#   kiln-gpu/gpu_check.sh profile # <= 5 min: where a ResNet-50 step's GPU time goes, kiln against PyTorch
#
# tests: every GPU test in its own process with a 60 s limit (TEST_TIMEOUT), within a 200 s budget for all
#        (TESTS_BUDGET: the ones left are listed as not run); `kiln info`; `kiln bench matmul`; `kiln train
#        configs/fashion_mnist_resnet20.json device=0` for one epoch in fp32 and in fp16 (top-1, skipped
#        steps, images/s); a SIGINT mid-epoch, then `kiln train RUN`, against the straight run (fp16);
#        `device=0,1` (one more GPU than the machine has) refused cleanly, naming the GPUs.
# bench: ResNet-50 224x224 training images/s, kiln against PyTorch (channels_last; AMP for fp16/bf16) on the
#        same GPU: fp32 batch 128, fp16 and bf16 batch 256, with the share of each kiln step the host spent
#        blocked (bench/bench_gpu.py); each kiln figure again with train.cuda_graph on; fp16 and bf16 once more
#        with every switch on (model.fused_bn_conv + the graph); torch.compile in fp16 and bf16 (PyTorch's
#        strongest); BENCH_AB="KILN_CUDNN_BATCH_NORM=0 KILN_FUSED_BN_RELU=0" adds an
#        A/B kiln run per variable (what each switch is worth; not by default: the part must stay within 5
#        minutes); AutoBatch (batch=-1)
#        on ResNet-50: what it measured and chose, and the training peak against its target; `kiln bench
#        conv_fusion` (cuDNN's fused BN-ReLU-conv-statistics and its fused backward vs the unfused ops per
#        ResNet-50 conv shape, bf16 batch 32; at most 100 s).
# e2e:   makes an ImageNet-shaped folder (`kiln data imagenet-like` from the kit's photos: 1000 classes,
#        30,000 train and 5,000 val JPEGs, ~100 KB each; its time and disk said), then bench/e2e_gpu.py:
#        ResNet-50 trained from it by kiln (configs/imagenet_resnet50.json's pipeline, data.workers =
#        cores - 1) and by PyTorch (ImageFolder + DataLoader with a worker per core, channels_last, AMP),
#        and each on synthetic batches (the ceiling), in fp16, bf16 (batch 256) and fp32 (batch 128):
#        images/s, data-wait and host-blocked shares, the ratios. E2E_DRY=1 is the dry run without a GPU
#        (CI, in tools/gpu_kit.sh): a 10-class folder, resnet18, 1+2 CPU steps; PyTorch where importable.
# Each part writes its whole log to $OUT/<part>.log and a one-screen summary (every test's verdict, every
# figure) to $OUT/<part>-summary.txt when OUT is set (else under /tmp/kiln-gpu-check), prints the
# summary last, and exits non-zero if anything failed.
# Environment: PYTHON (default python3, the one with torch), FASHION_MNIST_ROOT (default: the kit's
# data/fashion-mnist, then /usr/share/datasets/fashion-mnist; synthetic 28x28 data without either),
# TEST_TIMEOUT, TESTS_BUDGET, EPOCHS (default 1); for e2e: E2E_DRY, E2E_DIR (the folder; default under
# a temporary folder removed at the end), E2E_TIMEOUT (default 250 s for all the runs).
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
part=${1:-}
case "$part" in
  tests|bench|profile|e2e) ;;
  all) "$0" tests; a=$?; "$0" bench; b=$?; "$0" e2e; c=$?; exit $((a || b || c)) ;;
  *) echo "usage: gpu_check.sh tests|bench|e2e|profile|all (run from the unpacked GPU kit; see docs/cuda_backend.md)" >&2; exit 2 ;;
esac
[[ -x "$here/bin/kiln" ]] || { echo "gpu_check.sh: $here/bin/kiln is missing: run this script from the unpacked kit (tools/gpu_kit.sh)" >&2; exit 2; }

out=${OUT:-/tmp/kiln-gpu-check}
mkdir -p "$out"
log="$out/$part.log"
summary="$out/$part-summary.txt"
: >"$summary"
exec > >(tee "$log") 2>&1
tee_pid=$!
t_start=$(date +%s)
failures=0
section() { printf '\n==================== %s (%d s) ====================\n' "$*" $(($(date +%s) - t_start)); }
note() { echo "$*" >>"$summary"; }
pass() { note "PASS  $*"; }
fail() { note "FAIL  $*"; failures=$((failures + 1)); }

section "machine"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$summary"
else
  note "nvidia-smi: not on PATH"
fi
head -3 "$here/MANIFEST" 2>/dev/null | sed -n 2,3p | tee -a "$summary"
# shellcheck source=tools/kit_env.sh
if ! source "$here/kit_env.sh" >"$out/kit_env.txt" 2>&1; then
  cat "$out/kit_env.txt"
  fail "kit_env: CUDA libraries missing (above)"
fi
cat "$out/kit_env.txt"
sed 's/^kit_env: /lib   /' "$out/kit_env.txt" >>"$summary"
kiln="$here/bin/kiln"
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT

fashion_root() {
  local d
  for d in "${FASHION_MNIST_ROOT:-}" "$here/data/fashion-mnist" /usr/share/datasets/fashion-mnist; do
    [[ -n "$d" && -f "$d/train-images-idx3-ubyte.gz" ]] && { echo "$d"; return 0; }
  done
  return 1
}

# train_run LABEL ARGS...: runs kiln train, records top-1, images/s and skipped steps from its output.
train_run() {
  local label=$1; shift
  local t0 rc
  t0=$(date +%s)
  timeout -k 10 "${TRAIN_TIMEOUT:-150}" "$kiln" train "$@" train.runs_dir="$runs" train.plots=false \
    train.log_every=100 2>&1 | tee "$runs/last_train.log"
  rc=$?
  local val top1 skipped ips
  val=$(grep -E '^val ' "$runs/last_train.log" | tail -1)
  top1=$(sed -n 's/.*top1 \([0-9.]*%\).*/\1/p' <<<"$val")
  skipped=$(grep -o 'skipped [0-9]*' "$runs/last_train.log" | tail -1 | awk '{print $2}')
  ips=$(grep -o '[0-9.]* img/s' "$runs/last_train.log" | tail -1)
  local fig="top-1 ${top1:-?}, ${ips:-? img/s}, skipped steps ${skipped:-0}, $(($(date +%s) - t0)) s"
  if ((rc == 0)) && [[ -n "$top1" ]]; then
    pass "$label: $fig"
  else
    fail "$label (exit $rc): $fig; last line: $(tail -1 "$runs/last_train.log" | head -c 200)"
  fi
}

if [[ "$part" == tests ]]; then
  section "GPU tests, one process each, ${TEST_TIMEOUT:-60} s limit each"
  tests_bin="$here/bin/kiln_test_gpu"
  mapfile -t names < <("$tests_bin" --gtest_list_tests 2>"$runs/list.err" |
                       awk '/^[^ ]/ {suite=$1} /^  / {print suite $1}')
  # A binary that does not load (a missing library) lists nothing: say why.
  ((${#names[@]})) || fail "kiln_test_gpu --gtest_list_tests listed no test: $(tail -3 "$runs/list.err" | tr '\n' ' ' | head -c 300)"
  budget=${TESTS_BUDGET:-200}
  n_pass=0 n_fail=0 n_skip=0 n_left=0
  left=() skips=()
  t_tests=$(date +%s)
  for name in "${names[@]}"; do
    if (($(date +%s) - t_tests > budget)); then left+=("$name"); continue; fi
    t0=$(date +%s%N)
    timeout -k 5 "${TEST_TIMEOUT:-60}" "$tests_bin" --gtest_filter="$name" >"$runs/test.log" 2>&1
    rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    if ((rc == 124 || rc == 137)); then
      verdict="TIMEOUT"; n_fail=$((n_fail + 1))
    elif ((rc != 0)); then
      verdict="FAILED"; n_fail=$((n_fail + 1))
    elif grep -q '^\[  SKIPPED \]' "$runs/test.log"; then
      verdict="SKIPPED"; n_skip=$((n_skip + 1))
    else
      verdict="ok"; n_pass=$((n_pass + 1))
    fi
    printf '%-8s %6d ms  %s\n' "$verdict" "$ms" "$name"
    # Lines a test prints as "path: ..." (which kernel path a case took, e.g. cuDNN or kiln's) go to the summary.
    grep '^path: ' "$runs/test.log" | sed 's/^path: /path  /' >>"$summary"
    if [[ "$verdict" != ok ]]; then
      sed -n '/^\[ RUN/,$p' "$runs/test.log" | grep -v -E '^\[ *(RUN|OK) ' | head -15
      if [[ "$verdict" == SKIPPED ]]; then
        skips+=("SKIP  $name: $(grep -m1 -i -A1 skipped "$runs/test.log" | tail -1 | head -c 150)")
      else
        fail "$name: $verdict after $ms ms: $(grep -m1 -E 'Failure|error|what\(\)|Expected' "$runs/test.log" | head -c 200)"
      fi
    fi
  done
  n_left=${#left[@]}
  # Each skip on its own line, unless every test skipped (then one FAIL line below says why).
  if ((n_skip < ${#names[@]})); then for l in "${skips[@]}"; do note "$l"; done; fi
  ((n_left)) && printf 'not run (budget of %d s spent): %s\n' "$budget" "${left[*]}"
  if ((n_fail == 0 && n_left == 0 && n_pass > 0)); then
    pass "GPU tests: $n_pass passed, $n_skip skipped of ${#names[@]}"
  else
    fail "GPU tests: $n_pass passed, $n_fail failed, $n_skip skipped, $n_left not run of ${#names[@]}"
  fi
  # Every test skipping on a GPU machine means the tests did not see the GPU.
  ((n_skip == ${#names[@]} && n_skip > 0)) && fail "every GPU test skipped: no CUDA device visible to the test process"

  section "kiln info"
  if timeout -k 5 60 "$kiln" info; then pass "kiln info"; else fail "kiln info (exit $?)"; fi

  section "kiln bench matmul"
  if timeout -k 5 90 "$kiln" bench matmul | tee "$runs/matmul.log"; then
    pass "kiln bench matmul: $(grep -E '^matmul' "$runs/matmul.log" | awk '{printf "%s %s %s TFLOPS; ", $2, $3, $5}')"
  else
    fail "kiln bench matmul"
  fi

  section "kiln train fashion_mnist_resnet20 device=0, ${EPOCHS:-1} epoch(s), fp32 then fp16"
  if root=$(fashion_root); then
    for prec in fp32 fp16; do
      train_run "train resnet20 device=0 $prec (Fashion-MNIST, ${EPOCHS:-1} epoch)" \
        "$here/configs/fashion_mnist_resnet20.json" device=0 epochs="${EPOCHS:-1}" precision=$prec data.root="$root"
    done
    # precision=auto (bf16 on an sm_80+ GPU) and a 30-second time budget (at most 24 epochs): the
    # decision's timings synchronise with the GPU, and the run must end within its budget (5% slack:
    # at ~3 s an epoch, one slow epoch is a tenth of it).
    train_run "train resnet20 device=0 precision=auto, 0.5-minute budget" \
      "$here/configs/fashion_mnist_resnet20.json" device=0 epochs=24 precision=auto train.time_budget_minutes=0.5 \
      train.eval_every=4 data.root="$root"
    decided=$(grep -m1 '^time budget 0.5 min: [0-9]* of at most 24' "$runs/last_train.log")
    took=$(sed -n 's/^time budget 0.5 min: the run took [0-9.]* min (\([0-9]*\) s).*/\1/p' "$runs/last_train.log")
    run_dir=$(sed -n 's/^kiln: .* -> \(.*\)$/\1/p' "$runs/last_train.log" | head -1)
    chosen=$(grep -o '"precision": "[a-z0-9]*"' "$run_dir/config.json" 2>/dev/null | head -1)
    if [[ -n "$decided" && -n "$took" && "$chosen" == '"precision": "bf16"' ]] &&
       awk -v t="$took" 'BEGIN { exit !(t <= 31.5) }'; then
      pass "time budget on the GPU: ${decided#time budget 0.5 min: }; took $took s; auto chose bf16"
    else
      fail "time budget on the GPU: decision '${decided:-none}', took '${took:-?}' s (want <= 31.5), precision ${chosen:-?} (want bf16)"
    fi
    # SIGINT mid-epoch on the GPU (tools/engine/interrupt.h): exit 130 with a saved checkpoint, then `kiln
    # train RUN` finishes it; its val top-1 against the straight run's (equal on the CPU; on a GPU within
    # the non-determinism of cuDNN's algorithms: 1 point here).
    int_args=(device=0 epochs=2 precision=fp16 train.max_steps_per_epoch=150 data.root="$root" train.plots=false
              train.log_every=10 train.runs_dir="$runs/int")
    timeout -k 5 150 "$kiln" train "$here/configs/fashion_mnist_resnet20.json" "${int_args[@]}" name=straight \
      >"$runs/int_straight.log" 2>&1
    "$kiln" train "$here/configs/fashion_mnist_resnet20.json" "${int_args[@]}" name=stopped >"$runs/int_stopped.log" 2>&1 &
    int_pid=$!
    for _ in $(seq 1 1200); do grep -q '^train 2/2' "$runs/int_stopped.log" && break; sleep 0.1; done
    kill -INT "$int_pid"
    wait "$int_pid"
    int_rc=$?
    timeout -k 5 150 "$kiln" train "$runs/int/stopped" >>"$runs/int_stopped.log" 2>&1
    resume_rc=$?
    cat "$runs/int_stopped.log" | grep -v '^train'
    top_a=$(grep -E '^val   2/2' "$runs/int_straight.log" | sed -n 's/.*top1 \([0-9.]*\)%.*/\1/p')
    top_b=$(grep -E '^val   2/2' "$runs/int_stopped.log" | sed -n 's/.*top1 \([0-9.]*\)%.*/\1/p')
    stopped=$(grep -m1 'stopped at step' "$runs/int_stopped.log")
    if ((int_rc == 130 && resume_rc == 0)) && [[ -n "$top_a" && -n "$top_b" && -n "$stopped" ]] &&
       awk -v a="$top_a" -v b="$top_b" 'BEGIN { d = a - b; exit !(d <= 1 && d >= -1) }'; then
      pass "interrupt on the GPU: ${stopped#kiln: }; resumed top-1 $top_b% against $top_a% straight"
    else
      fail "interrupt on the GPU: exit $int_rc (want 130), resume exit $resume_rc, top-1 '${top_b:-?}' against '${top_a:-?}'"
    fi
  else
    cat >"$runs/synthetic.json" <<'JSON'
{"name": "synthetic_resnet20", "model": {"name": "resnet20", "in_channels": 1, "num_classes": 10},
 "data": {"source": "synthetic", "synthetic": {"size": 60000, "height": 28, "width": 28, "channels": 1,
          "num_classes": 10}, "batch_size": 128, "workers": 4},
 "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": true, "weight_decay": 5e-4},
 "train": {"epochs": 1}}
JSON
    for prec in fp32 fp16; do
      train_run "train resnet20 device=0 $prec (synthetic data: speed only)" "$runs/synthetic.json" device=0 \
        epochs="${EPOCHS:-1}" precision=$prec
    done
  fi

  section "device=0,1 on a machine with fewer GPUs: refused, naming the GPUs"
  timeout -k 5 60 "$kiln" train "$here/configs/fashion_mnist_cnn.json" device=0,1 epochs=1 train.runs_dir="$runs" \
    >"$runs/dp.log" 2>&1
  rc=$?
  cat "$runs/dp.log"
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  if ((ngpu >= 2)); then
    note "SKIP  device=0,1 refusal: this machine has $ngpu GPUs"
  elif ((rc == 1)) && grep -q 'cuda:0' "$runs/dp.log" && grep -q -i 'no such GPU\|available' "$runs/dp.log"; then
    pass "device=0,1 refused: $(grep -m1 -i 'available' "$runs/dp.log" | head -c 160)"
  else
    fail "device=0,1 on a $ngpu-GPU machine: exit $rc (want 1 and a line naming cuda:0): $(tail -1 "$runs/dp.log" | head -c 160)"
  fi
fi

if [[ "$part" == bench ]]; then
  section "ResNet-50 training: kiln vs PyTorch on this GPU (bench/bench_gpu.py)"
  py=${PYTHON:-python3}
  PYTHONUNBUFFERED=1 timeout -k 10 "${BENCH_TIMEOUT:-300}" "$py" "$here/bench/bench_gpu.py" "$kiln" \
    --skip-matmul --summary "$runs/bench_summary.txt" ${BENCH_AB:+$(printf -- '--kiln-ab %s ' $BENCH_AB)}
  rc=$?
  [[ -f "$runs/bench_summary.txt" ]] && cat "$runs/bench_summary.txt" >>"$summary"
  if ((rc == 0)); then pass "bench_gpu.py"; else fail "bench_gpu.py (exit $rc)"; fi

  section "kiln bench conv_fusion (cuDNN runtime fusion per ResNet-50 conv shape, bf16 batch 32)"
  timeout -k 5 "${FUSION_TIMEOUT:-100}" "$kiln" bench conv_fusion batch=32 dtype=bf16 iters=5 device=0 2>&1 |
    tee "$runs/conv_fusion.log"
  rc=${PIPESTATUS[0]}
  if ((rc == 0)); then
    pass "bench conv_fusion: $(grep -cE '^cuda:[0-9]+ .* fused( |$)' "$runs/conv_fusion.log") of 19 shapes chose fused; $(grep -m1 -o 'unfused [0-9.]* ms, with the choices [0-9.]* ms ([0-9.]*x)' "$runs/conv_fusion.log")"
  else
    fail "bench conv_fusion (exit $rc): $(tail -1 "$runs/conv_fusion.log" | head -c 160)"
  fi

  section "AutoBatch: ResNet-50, synthetic 224x224, batch=-1, 5 steps"
  cat >"$runs/autobatch.json" <<'JSON'
{"name": "autobatch_resnet50", "model": {"name": "resnet50", "num_classes": 1000},
 "data": {"source": "synthetic", "synthetic": {"size": 4096, "height": 224, "width": 224, "channels": 3,
          "num_classes": 1000}, "batch_size": -1, "workers": 12},
 "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4},
 "train": {"epochs": 1, "max_steps_per_epoch": 5, "eval_every": 100, "log_every": 1}}
JSON
  timeout -k 10 "${AUTOBATCH_TIMEOUT:-120}" "$kiln" train "$runs/autobatch.json" device=0 train.runs_dir="$runs" \
    train.plots=false 2>&1 | tee "$runs/autobatch.log"
  rc=$?
  ab=$(grep -i -E 'autobatch|fit |target|peak' "$runs/autobatch.log" | head -4 | tr '\n' ' ' | head -c 400)
  if ((rc == 0)); then
    pass "AutoBatch ResNet-50: $ab"
  else
    fail "AutoBatch ResNet-50 (exit $rc): $ab; last line: $(tail -1 "$runs/autobatch.log" | head -c 200)"
  fi
fi

if [[ "$part" == e2e ]]; then
  py=${PYTHON:-python3}
  dry=${E2E_DRY:-0}
  if ((dry)); then
    shape=(classes=10 train=8 val=1)
    e2e_args=(--device cpu --precisions fp32,bf16 --batch 4 --fp32-batch 4 --warmup 1 --steps 2 --log-every 1
              --workers 2 --torch-workers 2 --model resnet18)
  else
    shape=(classes=1000 train=30 val=5)
    e2e_args=(--device cuda)
  fi
  section "an ImageNet-shaped folder from the kit's photos: kiln data imagenet-like ${shape[*]}"
  folder=${E2E_DIR:-$runs/imagenet-like}
  t0=$(date +%s)
  if timeout -k 5 120 "$kiln" data imagenet-like photos="$here/data/photos" out="$folder" "${shape[@]}" |
     tee "$runs/imagenet_like.log"; then
    made=$(grep -m1 '^imagenet-like:' "$runs/imagenet_like.log" | sed 's/ -> .*//')
    pass "${made#imagenet-like: }; $(du -sh "$folder" | cut -f1) on disk, $(($(date +%s) - t0)) s in all"
    section "ResNet-50 from JPEG files: kiln against PyTorch's DataLoader on this machine (bench/e2e_gpu.py)"
    PYTHONUNBUFFERED=1 timeout -k 10 "${E2E_TIMEOUT:-250}" "$py" "$here/bench/e2e_gpu.py" "$kiln" --folder "$folder" \
      --configs "$here/configs" --runs "$runs/e2e" --summary "$runs/e2e_summary.txt" "${e2e_args[@]}"
    rc=$?
    [[ -f "$runs/e2e_summary.txt" ]] && cat "$runs/e2e_summary.txt" >>"$summary"
    if ((rc == 0)); then pass "e2e_gpu.py$( ((dry)) && echo ' (dry run)')"; else fail "e2e_gpu.py (exit $rc)"; fi
  else
    fail "kiln data imagenet-like (photos $here/data/photos): $(tail -1 "$runs/imagenet_like.log" | head -c 200)"
  fi
fi

if [[ "$part" == profile ]]; then
  # ncu times each kernel of kiln's timed steps alone (bench train profile=1 brackets them);
  # torch.profiler records PyTorch's same step; profile_gpu.py sums both by kind of kernel.
  section "ResNet-50 step, ms per kind of kernel: kiln (ncu) and PyTorch (torch.profiler)"
  py=${PYTHON:-python3}
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  tables=()
  for run in ${PROFILE_RUNS:-fp16:256 fp32:128 bf16:256}; do
    prec=${run%%:*} batch=${run##*:}
    if [[ -n "$ncu" ]]; then
      timeout -k 10 "${PROFILE_TIMEOUT:-120}" "$ncu" --csv --metrics gpu__time_duration.sum --profile-from-start off \
        --clock-control none --cache-control none "$kiln" bench train model=resnet50 batch="$batch" size=224 \
        channels=3 classes=1000 steps=2 warmup=3 device=cuda:0 cudnn_benchmark=1 precision="$prec" profile=1 \
        >"$runs/ncu_$prec.csv" 2>"$runs/ncu_$prec.err"
      rc=$?
      if ((rc == 0)) && "$py" "$here/bench/profile_gpu.py" ncu "$runs/ncu_$prec.csv" --steps 2 --out "$runs/kiln_$prec.csv"; then
        tables+=("$runs/kiln_$prec.csv")
        pass "ncu kiln $prec batch $batch"
      else
        fail "ncu kiln $prec batch $batch (exit $rc): $(tail -2 "$runs/ncu_$prec.err" | tr '\n' ' ' | head -c 200)"
      fi
    else
      fail "ncu not found (PATH, /opt/nvidia/nsight-compute, /usr/local/cuda/bin): no kiln profile"
    fi
    if PYTHONUNBUFFERED=1 timeout -k 10 "${PROFILE_TIMEOUT:-120}" "$py" "$here/bench/profile_gpu.py" torch \
        --precision "$prec" --batch "$batch" --out "$runs/torch_$prec.csv"; then
      tables+=("$runs/torch_$prec.csv")
      pass "torch.profiler $prec batch $batch"
    else
      fail "torch.profiler $prec batch $batch"
    fi
    # After each precision, so that a kill of the whole check keeps what was profiled so far.
    if ((${#tables[@]})); then
      "$py" "$here/bench/profile_gpu.py" compare "${tables[@]}" --top 12 >"$out/profile-compare.txt" 2>&1 ||
        fail "profile_gpu.py compare: $(tail -1 "$out/profile-compare.txt" | head -c 200)"
    fi
  done
  if [[ -s "$out/profile-compare.txt" ]]; then
    cat "$out/profile-compare.txt"
    sed -n '1,/^$/p' "$out/profile-compare.txt" >>"$summary"
  fi
fi

section "summary of $part"
note "$part: $failures failure(s), $(($(date +%s) - t_start)) s"
cat "$summary"
exec >&- 2>&-
wait "$tee_pid" 2>/dev/null
exit $((failures > 0))
