#!/usr/bin/env bash
# Create .venv and install sweeper with everything it needs (idempotent).
#   bash scripts/setup.sh            # CPU torch (the pinned 2.13.0 CPU build; a laptop, CI)
#   TORCH_SPEC="torch==2.13.0" ...   # on a GPU machine, the CUDA build from your usual index
# torch is installed first and pinned: a plain 'torch' requirement would pull a multi-GB CUDA build here.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
pip install -q "${TORCH_SPEC:-torch==2.13.0}" 2>&1 | grep -v "^WARNING: Location" || true
pip install -q -e '.[dev,tracking]' 2>&1 | grep -v "^WARNING: Location" || true
python -c "import torch, transformers, sweeper; print(f'sweeper ready: torch {torch.__version__}, transformers {transformers.__version__}')"
