#!/usr/bin/env bash
# The wheels provision's controller needs on the lent H200 machine (no network there; its image has
# torch, nvidia-ml-py, click, jinja2, PyYAML and rich, but no Ansible), so that gpu_check.sh can run
# `provision probe/plan/up --check` there. Run here, in the repository root, before the device call:
#
#   echo /.whl/ >> .git/info/exclude; benchmarks/gpu_wheels.sh .whl
#
# then carry `.whl` and start the device command with
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl &&
#     export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH   # ansible-playbook is in /tmp/site/bin
# The image's Python is 3.12 on x86_64 (the device tool's KINDS.md); PYTHON_VERSION overrides it.
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
DIR=$1
PY=${PYTHON:-python3}
VERSION=${PYTHON_VERSION:-3.12}
mkdir -p "$DIR"
# With their dependencies, resolved for the target Python and platform (pip does that from the
# wheels' metadata). What the image already has comes too; one version of each travels.
"$PY" -m pip download -q --only-binary=:all: --python-version "$VERSION" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d "$DIR" 'ansible-core>=2.15' 'ansible-runner>=2.3' 'paramiko>=3.0'
du -sh "$DIR"
