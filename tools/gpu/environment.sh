#!/usr/bin/env bash
# Sourced by real_run.sh, perf.sh and table3.sh before anything else; not run on its own.
#
# A GPU image ships its own tokenizers and sacrebleu, and they are not the versions this code is
# tested with: the BPE vocabulary comes from tokenizers, and a sacreBLEU signature names
# sacreBLEU's version. So the runs use exactly the versions requirements.txt pins. On a machine
# without network they come from the wheels in .whl/ (made by `bash tools/gpu/wheels.sh` on a
# machine with network, and brought along with the code): they are installed into WHEEL_SITE
# (default /tmp/site, a few seconds), which goes first on PYTHONPATH. Then the versions in use
# are printed, and the script stops here when tokenizers or sacrebleu is not the pinned version.

_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
WHEEL_SITE="${WHEEL_SITE:-/tmp/site}"
if [ -d "$_root/.whl" ] && compgen -G "$_root/.whl/*.whl" > /dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$WHEEL_SITE" "$_root"/.whl/*.whl || {
        echo "error: could not install the wheels of .whl/ into $WHEEL_SITE" >&2
        exit 2
    }
    export PYTHONPATH="$WHEEL_SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
"$PYTHON" - "$_root/requirements.txt" <<'PY' || exit 2
import re
import sys

import numpy
import sacrebleu
import safetensors
import tokenizers
import torch

with open(sys.argv[1]) as file:
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", file.read(), re.MULTILINE))
cuda = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU visible"
print(f"python {sys.version.split()[0]}, torch {torch.__version__} ({cuda}), numpy {numpy.__version__}")
wrong = []
for module in (tokenizers, sacrebleu, safetensors):
    name, have = module.__name__, module.__version__
    print(f"{name} {have} from {module.__file__}")
    if have != pins.get(name):
        wrong.append(f"{name} {have} where requirements.txt pins {pins.get(name)}")
if wrong:
    print(
        f"error: {'; '.join(wrong)}. Make the wheels with `bash tools/gpu/wheels.sh` on a machine "
        "with network and bring .whl/ along with the code.",
        file=sys.stderr,
    )
    sys.exit(1)
PY
unset _root
