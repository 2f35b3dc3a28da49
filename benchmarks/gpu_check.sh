#!/usr/bin/env bash
# One short check of the CUDA paths on a GPU machine (a few minutes on one H200):
#   bash benchmarks/gpu_check.sh [out_dir]
# 1. equivalence: single / ddp / zero / fsdp (nccl, one rank each) give the same fp32 losses;
# 2. precision and strategies: bf16-mixed, 16-mixed (GradScaler), dp, ddp2, fsdp grad_op,
#    fsdp bf16 params, fsdp cpu_offload, torch.compile; samples/s, MFU, peak memory;
#    an FSDP checkpoint evaluated from disk; a device count above the GPUs is rejected;
# 2b. the transformer under tensor parallelism (tp, fsdp_tp with 2+ GPUs), tokens/s;
# 3. benchmarks/overhead.py on the GPU (engine vs hand-written loop); 3b. hf_transformer.py (a
#    transformers Llama, engine vs hand-written loop) when transformers is installed;
# 4. a packed sweep (hydra/launcher=packed) of 2 one-GPU jobs beside each other when the node
#    has 2+ GPUs (else one after the other on its one GPU): each job's CUDA_VISIBLE_DEVICES and
#    the wall time; and strategy=auto with a probe on every GPU (2+), what it chose.
# Prints one line per run and a table; every run's files are under out_dir/runs.
# SMOKE=1 ACCEL=cpu runs the same plumbing on a CPU machine (tiny sizes, ~15 min on 2 cores: bf16/fp16
# autocast is slow on a CPU), skipping by name the cases that exist only on CUDA.
# On a machine whose python has torch but not Hydra, bring the wheels (made where pip works):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#       -d .whl hydra-core==1.3.2 omegaconf==2.3.0 && pip wheel --no-deps -w .whl antlr4-python3-runtime==4.9.3
# and there: pip install --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
#            bash benchmarks/gpu_check.sh $OUT/check
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-$(mktemp -d)}}
RUNS=$OUT/runs
mkdir -p "$RUNS"
ACCEL=${ACCEL:-cuda}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
$PY - <<'PY' || exit 1
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
if torch.cuda.is_available():
    print("nccl", torch.cuda.nccl.version())
PY
if [ "${SMOKE:-0}" = 1 ]; then
  DATA=(datamodule=synthetic datamodule.input_shape=[3,16,16] datamodule.num_samples=640 datamodule.batch_size=32 model=resnet18)
  STEPS=6
else
  DATA=(datamodule=synthetic datamodule.input_shape=[3,32,32] datamodule.num_samples=20480 datamodule.batch_size=256 model=resnet18)
  STEPS=60
fi
COMMON=("${DATA[@]}" trainer.accelerator=$ACCEL trainer.max_epochs=1 trainer.enable_progress_bar=false
        logger=csv seed=7 "callbacks=[model_checkpoint,throughput]" callbacks.throughput.log_every_n_steps=20
        trainer.num_sanity_val_steps=0)
status=0

run() {  # run NAME EXPECTED_EXIT OVERRIDES...
  local name=$1 expect=$2; shift 2
  local t0=$SECONDS
  timeout 200 $PY -m framework.train "${COMMON[@]}" "$@" hydra.run.dir="$RUNS/$name" > "$RUNS/$name.log" 2>&1
  local rc=$?
  if [ $rc -ne "$expect" ]; then
    echo "FAIL $name: exit $rc, expected $expect"; tail -15 "$RUNS/$name.log"; status=1
  else
    echo "ok   $name ($((SECONDS - t0)) s)"
  fi
}

# Cases that exist only on CUDA: on ACCEL=cpu (or mps) the framework refuses them by design
# (ddp2 is DataParallel over a node's GPUs, FSDP cpu_offload moves CUDA parameters to the host,
# and a CPU has no GPU count to exceed), so a smoke run skips them by name; cuda/auto run them.
run_cuda() {  # run_cuda NAME EXPECTED_EXIT OVERRIDES...
  case $ACCEL in
    cpu|mps) echo "SKIP $1: needs CUDA (ACCEL=$ACCEL)" ;;
    *) run "$@" ;;
  esac
}

# 1. Equivalence, fp32 and deterministic: the loss of every step, per strategy.
EQ=(trainer.precision=32-true trainer.deterministic=true trainer.max_steps=20 trainer.log_every_n_steps=1)
run eq_single 0 "${EQ[@]}" strategy=single
run eq_ddp 0 "${EQ[@]}" strategy=ddp
run eq_zero 0 "${EQ[@]}" strategy=zero
run eq_fsdp 0 "${EQ[@]}" strategy=fsdp "strategy.wrap_classes=[BasicBlock]"

# 2. Precision and strategies at speed (no per-step logging).
P=(trainer.max_steps=$STEPS trainer.log_every_n_steps=20)
run single_32 0 "${P[@]}" strategy=single trainer.precision=32-true
run single_bf16 0 "${P[@]}" strategy=single trainer.precision=bf16-mixed
run single_fp16 0 "${P[@]}" strategy=single trainer.precision=16-mixed
run dp_bf16 0 "${P[@]}" strategy=dp trainer.precision=bf16-mixed
run ddp_bf16 0 "${P[@]}" strategy=ddp trainer.precision=bf16-mixed
run_cuda ddp2_bf16 0 "${P[@]}" strategy=ddp2 trainer.precision=bf16-mixed
run zero_bf16 0 "${P[@]}" strategy=zero trainer.precision=bf16-mixed
run fsdp_bf16 0 "${P[@]}" strategy=fsdp trainer.precision=bf16-mixed "strategy.wrap_classes=[BasicBlock]" export_weights=true
run fsdp_gradop_bf16 0 "${P[@]}" strategy=fsdp strategy.sharding=grad_op trainer.precision=bf16-mixed
run fsdp_params_bf16 0 "${P[@]}" strategy=fsdp strategy.param_dtype=bf16 strategy.reduce_dtype=fp32
run_cuda fsdp_offload 0 "${P[@]}" strategy=fsdp strategy.cpu_offload=true
run compile_bf16 0 "${P[@]}" strategy=single trainer.precision=bf16-mixed trainer.compile=true
run_cuda too_many_devices 2 "${P[@]}" strategy=ddp trainer.devices=$(( $($PY -c "import torch; print(torch.cuda.device_count())") + 1 ))
[ -f "$RUNS/too_many_devices.log" ] &&  # absent when skipped
  grep -h "trainer.accelerator\|trainer.devices" "$RUNS/too_many_devices.log" | head -3

# 2b. The transformer (model=gpt on datamodule=text) under tensor parallelism over NCCL: tp over every
# GPU (1 GPU: the DTensor path with one rank), fsdp_tp in groups of 2 (needs 2 GPUs), tokens/s.
NGPU=$($PY -c "import torch; print(max(1, torch.cuda.device_count()))")
GPT=(model=gpt datamodule=text task=language_modeling optimizer=adamw trainer.accelerator=$ACCEL trainer.max_epochs=1
     trainer.enable_progress_bar=false logger=csv seed=7 callbacks=none trainer.num_sanity_val_steps=0
     trainer.max_steps=$STEPS trainer.log_every_n_steps=10 trainer.limit_val_batches=4 trainer.limit_test_batches=4)
run_gpt() {  # run_gpt NAME OVERRIDES...
  local name=$1; shift
  local t0=$SECONDS
  if timeout 300 $PY -m framework.train "${GPT[@]}" "$@" hydra.run.dir="$RUNS/$name" > "$RUNS/$name.log" 2>&1; then
    echo "ok   $name ($((SECONDS - t0)) s): $($PY -c "import json,sys; r=json.load(open(sys.argv[1])); print(round(r['throughput'].get('tokens_per_s') or 0), 'tokens/s, val/loss', round(r['metrics'].get('val/loss', 0), 4))" "$RUNS/$name/results.json")"
  else
    echo "FAIL $name"; tail -15 "$RUNS/$name.log"; status=1
  fi
}
run_gpt gpt_single_bf16 strategy=single trainer.precision=bf16-mixed
run_gpt gpt_tp strategy=tp trainer.devices=$NGPU
run_gpt gpt_tp_bf16 strategy=tp trainer.devices=$NGPU trainer.precision=bf16-mixed
if [ "$NGPU" -ge 2 ] && [ "$ACCEL" != cpu ]; then
  run_gpt gpt_fsdp_tp strategy=fsdp_tp trainer.devices=$NGPU strategy.tp=2 trainer.precision=bf16-mixed
else
  echo "SKIP gpt_fsdp_tp: needs 2 GPUs ($NGPU here)"
fi

# The FSDP checkpoint, loaded back and tested by framework.evaluate.
t0=$SECONDS
if $PY -m framework.evaluate ckpt_path="$RUNS/fsdp_bf16/checkpoints/last" > "$RUNS/evaluate.log" 2>&1; then
  echo "ok   evaluate fsdp checkpoint ($((SECONDS - t0)) s): $(grep -o "test/acc[^,}]*" "$RUNS/evaluate.log" | tail -1)"
else
  echo "FAIL evaluate"; tail -15 "$RUNS/evaluate.log"; status=1
fi

$PY - "$RUNS" <<'PY'
import csv, json, pathlib, sys
runs = pathlib.Path(sys.argv[1])
def losses(name):
    with open(runs / name / "metrics.csv") as f:
        return [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]
ref = losses("eq_single")
print(f"\nequivalence over {len(ref)} steps (fp32, deterministic), max |loss - single|:")
for name in ("eq_ddp", "eq_zero", "eq_fsdp"):
    other = losses(name)
    diff = max(abs(a - b) for a, b in zip(ref, other)) if len(other) == len(ref) else float("nan")
    print(f"  {name:<10} {diff:.3g}  (steps {len(other)})")
print(f"\n{'run':<18} {'status':<9} {'samples/s':>10} {'step ms':>8} {'peak MiB':>9} {'state MiB':>9} {'MFU':>6} {'val/acc':>7}")
for d in sorted(p for p in runs.iterdir() if p.is_dir()):
    f = d / "results.json"
    if not f.exists():
        continue
    r = json.loads(f.read_text())
    t, m, metrics = r.get("throughput") or {}, r.get("memory") or {}, r.get("metrics") or {}
    mfu = ""
    if (d / "metrics.csv").exists():
        with open(d / "metrics.csv") as fh:
            vals = [float(x["throughput/mfu"]) for x in csv.DictReader(fh) if x.get("throughput/mfu")]
        mfu = f"{vals[-1]:.3f}" if vals else ""
    state = max(m.get("model_state_bytes_per_rank") or [0]) / 2**20
    print(f"{d.name:<18} {r['status']:<9} {t.get('samples_per_s') or 0:>10.0f} {t.get('step_time_ms_median') or 0:>8.2f} "
          f"{max(m.get('peak_bytes_per_rank') or [0]) / 2**20:>9.0f} {state:>9.1f} {mfu:>6} {metrics.get('val/acc', float('nan')):>7.3f}")
PY
[ $? -eq 0 ] || status=1

# 3. Engine vs hand-written loop on the GPU.
if [ "${SMOKE:-0}" = 1 ]; then
  $PY benchmarks/overhead.py --accelerator "$ACCEL" --steps 20 --repeats 1 || status=1
else
  $PY benchmarks/overhead.py --accelerator "$ACCEL" --steps 300 --repeats 5 || status=1
fi

# 3b. A transformers Llama in the engine vs a hand-written transformers loop (when .[hf] is installed).
if $PY -c "import transformers" 2>/dev/null; then
  DEV=$([ "$ACCEL" = cpu ] && echo cpu || echo cuda)
  if [ "${SMOKE:-0}" = 1 ]; then
    (cd benchmarks && $PY hf_transformer.py --device "$DEV" --steps 10 --repeats 1) || status=1
  else
    (cd benchmarks && $PY hf_transformer.py --device "$DEV" --steps 100 --repeats 3) || status=1
  fi
else
  echo "skip hf_transformer.py: transformers is not installed (pip install '.[hf]')"
fi

# 4. Packed sweep: 2 one-device jobs on the node's devices, and strategy=auto's probe.
t0=$SECONDS
timeout 300 $PY -m framework.train -m hydra/launcher=packed "${COMMON[@]}" seed=1,2 \
  hydra.sweep.dir="$OUT/packed" > "$OUT/packed.log" 2>&1 || { echo "FAIL packed sweep"; tail -15 "$OUT/packed.log"; status=1; }
echo "packed sweep of 2 jobs: $((SECONDS - t0)) s"
$PY - "$OUT/packed" <<'PY' || status=1
import json, pathlib, sys
sweep = pathlib.Path(sys.argv[1])
packing = json.loads((sweep / "packing.json").read_text())
for num, job in sorted(packing["jobs"].items()):
    r = json.loads((sweep / num / "results.json").read_text())
    print(f"  job {num}: {packing['kind']} devices {job['devices']}, CUDA_VISIBLE_DEVICES="
          f"{r['placement']['cuda_visible_devices']}, {r['status']}, {job['ended_at'] - job['started_at']:.1f} s, "
          f"beside {job['beside']}, {r['throughput'].get('samples_per_s') or 0:.0f} samples/s")
PY
GPUS=$($PY -c "import torch; print(torch.cuda.device_count())")
if [ "${GPUS:-0}" -ge 2 ]; then
  run auto_probe 0 strategy=auto trainer.devices="$GPUS" strategy.probe_steps=5
  $PY -c "import json,sys; c=json.load(open(sys.argv[1]))['strategy_choice']; print('auto chose', c['chosen'], \
    {r['strategy']: r['step_time_s'] for r in c['candidates']})" "$RUNS/auto_probe/results.json" || status=1
fi
exit $status
