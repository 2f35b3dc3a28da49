#!/usr/bin/env bash
# One short check of the CUDA paths on a GPU machine: nccl, dp, ddp, fsdp, bf16.
#   bash benchmarks/gpu_check.sh        (prints one line per run, then the figures)
# Needs a CUDA device; with one GPU, dp/ddp/fsdp run on 1 device (nccl still initialises).
set -uo pipefail
cd "$(dirname "$0")/.."
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.cuda.get_device_name(0), torch.cuda.device_count(), 'device(s)')" || exit 1
N=$(python -c "import torch; print(torch.cuda.device_count())")
OUT=${OUT:-$(mktemp -d)}
COMMON="datamodule=synthetic datamodule.input_shape=[3,32,32] datamodule.num_samples=16384 datamodule.batch_size=256
        model=resnet18 trainer.accelerator=cuda trainer.precision=bf16-mixed trainer.max_epochs=1 trainer.max_steps=40
        trainer.enable_progress_bar=false logger=csv"
status=0
for run in "single:strategy=single" "dp:strategy=dp trainer.devices=$N" "ddp:strategy=ddp trainer.devices=$N" \
           "fsdp:strategy=fsdp trainer.devices=$N strategy.wrap_classes=[BasicBlock]" \
           "fsdp_bf16_params:strategy=fsdp trainer.devices=$N strategy.param_dtype=bf16 strategy.reduce_dtype=fp32"; do
  name=${run%%:*}; args=${run#*:}
  python -m framework.train $COMMON $args hydra.run.dir="$OUT/$name" > "$OUT/$name.log" 2>&1 || { echo "$name FAILED (see $OUT/$name.log)"; tail -5 "$OUT/$name.log"; status=1; }
done
python - "$OUT" <<'PY'
import json, pathlib, sys
for d in sorted(pathlib.Path(sys.argv[1]).iterdir()):
    f = d / "results.json"
    if f.exists():
        r = json.loads(f.read_text())
        t = r.get("throughput") or {}
        m = r.get("memory") or {}
        print(f"{d.name:<18} {r['status']:<9} world={r.get('world_size')} samples/s={t.get('samples_per_s') or 0:9.1f} "
              f"step_ms={t.get('step_time_ms_median') or 0:7.2f} peak_MiB={max(m.get('peak_bytes_per_rank') or [0]) / 2**20:8.1f} "
              f"val/acc={r.get('metrics', {}).get('val/acc', float('nan')):.3f}")
PY
exit $status
