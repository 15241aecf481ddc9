#!/usr/bin/env bash
# Every GPU item in one run on a lent GPU machine (../shared/GPU.md): `nvidia-smi`, then
# `bench/gpu.py`, which runs `pytest -m gpu` and `hoptune doctor` itself and writes its
# section of BENCHMARKS.md; its JSON line, its log and BENCHMARKS.md land under $OUT.
#
#   bash bench/gpu_session.sh [bench/gpu.py's options]      (from the checkout's root)
#
# With wheels in .whl/ (GPU.md says which; $HOPTUNE_WHEELS names another folder), they
# are installed into /tmp/site and the checkout is used through PYTHONPATH, the machine's
# own torch and CuPy left in place; without, the current environment is used. On a
# machine without a GPU every step runs all the same: bench/gpu.py says so, writes
# nothing and prints its JSON line of nulls.
set -uo pipefail
out=${OUT:-$(mktemp -d)}
python=${PYTHON:-python3}
mkdir -p "$out"
wheels=${HOPTUNE_WHEELS:-.whl}
if compgen -G "$wheels/*.whl" > /dev/null; then
  "$python" -m pip install -q --no-index --no-deps --target /tmp/site "$wheels"/*.whl || exit 1
  export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
{ nvidia-smi -L && nvidia-smi; } > "$out/nvidia-smi.txt" 2>&1
# each line of the log stamped with the time, so the stages' lengths show
PYTHONUNBUFFERED=1 "$python" bench/gpu.py "$@" 2> >(while IFS= read -r line; do
  printf '%s %s\n' "$(date +%T)" "$line"; done > "$out/gpu.log") > "$out/gpu.json"
status=$?
sleep 1  # the stamping loop's last lines
cp BENCHMARKS.md "$out/BENCHMARKS.md"
tail -n 1 "$out/gpu.json"
echo "bench/gpu.py exit $status; nvidia-smi.txt, gpu.json, gpu.log and BENCHMARKS.md in $out"
exit "$status"
