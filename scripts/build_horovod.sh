#!/usr/bin/env bash
# Build Horovod 0.28.1 (its last release) for CPU/gloo into a venv, against torch 2.13.0 (CPU build),
# with this project installed beside it, so that `strategy.backend=horovod` can run under horovodrun.
#
#   bash scripts/build_horovod.sh [VENV]      # default: .cache/horovod-venv (ignored by git)
#
# Horovod 0.28.1 does not build against torch >= 2.1 as released: its CMake files compile the torch
# extension as C++14 while torch's headers need C++17. This script patches exactly that and nothing
# else. About 8 minutes on 2 cores; a venv that already imports horovod.torch is left as it is.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${1:-$ROOT/.cache/horovod-venv}"
HOROVOD_VERSION=0.28.1
TORCH_VERSION=2.13.0   # the CPU build the package index serves; torch 2.14.1 here is a CUDA build

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import horovod.torch" 2>/dev/null; then
  echo "horovod already built in $VENV"
  exit 0
fi

rm -rf "$VENV"
python3 -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install -q --upgrade "pip<26.2" setuptools wheel
"$PY" -m pip install -q "torch==$TORCH_VERSION" cmake psutil pyyaml cloudpickle packaging
# The project's dependencies without its torch/torchvision pins (torchvision from PyPI does not load
# beside this torch; the framework imports it only for resnet18 and the torchvision datasets); the
# project itself is installed last, with --no-deps.
"$PY" -m pip install -q "hydra-core>=1.3,<1.4" "omegaconf>=2.3,<2.4" tensorboard tqdm matplotlib numpy \
  "torchmetrics>=1.0" \
  "pytest>=7" "pytest-timeout>=2"

SRC="$(mktemp -d)"
trap 'rm -rf "$SRC"' EXIT
"$PY" -m pip download -q --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$SRC"
tar xzf "$SRC/horovod-$HOROVOD_VERSION.tar.gz" -C "$SRC"
HVD="$SRC/horovod-$HOROVOD_VERSION"
# The one patch: C++17 where the top-level and the torch extension's CMake files ask for C++14.
sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$HVD/CMakeLists.txt" "$HVD/horovod/torch/CMakeLists.txt"
grep -q 'CMAKE_CXX_STANDARD 17' "$HVD/horovod/torch/CMakeLists.txt"

export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
  HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=gloo MAKEFLAGS="-j$(nproc)"
"$PY" -m pip install -q --no-build-isolation --no-deps "$HVD"
# Last, and under the lock .ci/run's own editable install holds: two pip installs of one source tree
# at once would write its egg-info together (CI builds this while it installs the project).
mkdir -p "$ROOT/.cache"
flock "$ROOT/.cache/install.lock" "$PY" -m pip install -q --no-deps -e "$ROOT"
"$PY" -c "import horovod, horovod.torch as hvd; print('horovod', horovod.__version__, 'gloo built:', hvd.gloo_built())"
