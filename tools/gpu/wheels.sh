#!/usr/bin/env bash
# Downloads into .whl/ the wheels that a GPU machine without network needs to run this code with
# the versions requirements.txt pins: tokenizers (the BPE vocabulary), sacrebleu (its
# signature names its version) and safetensors (the file of the evaluated model). Run it once,
# from the repository root, on a machine with network; then bring .whl/ (about 4 MB) along with
# the code. real_run.sh, perf.sh and
# table3.sh install these wheels first thing (tools/gpu/environment.sh).
#
#   bash tools/gpu/wheels.sh
#
# The wheels are for Linux x86_64 and CPython 3.12; for another Python on the GPU machine, e.g.
#   WHEEL_PYTHON=3.11 bash tools/gpu/wheels.sh
# WHEELS names another folder than .whl/. The script stops when a wheel requires a package that
# the GPU image lacks (the list below); pin that package in requirements.txt and add it to
# PACKAGES.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python3}"
WHEELS="${WHEELS:-.whl}"
WHEEL_PYTHON="${WHEEL_PYTHON:-3.12}"
PACKAGES=(tokenizers sacrebleu safetensors)
# What the GPU image already holds, in versions that these two accept.
PRESENT=(colorama lxml portalocker regex tabulate numpy tqdm huggingface-hub pyyaml requests
    filelock fsspec packaging typing-extensions)

wanted=()
for name in "${PACKAGES[@]}"; do
    version=$(sed -n "s/^$name==\([^ #]*\).*/\1/p" requirements.txt)
    if [ -z "$version" ]; then
        echo "error: requirements.txt pins no version of $name (a line $name==VERSION)" >&2
        exit 2
    fi
    wanted+=("$name==$version")
done

mkdir -p "$WHEELS"
rm -f "$WHEELS"/*.whl  # only the pinned versions: two versions of one package cannot install
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$WHEEL_PYTHON" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$WHEELS" "${wanted[@]}"

# What each wheel requires (extras aside) must be one of the wheels or already on the GPU image.
"$PYTHON" - "$WHEELS" "${PACKAGES[@]}" "${PRESENT[@]}" <<'PY'
import re
import sys
import zipfile
from pathlib import Path

folder, known = Path(sys.argv[1]), set(sys.argv[2:])
missing = []
for wheel in sorted(folder.glob("*.whl")):
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    needs = []
    for line in lines:
        if line.startswith("Requires-Dist:") and not re.search(r"\bextra\s*==", line):
            name = re.match(r"[A-Za-z0-9._-]+", line.split(":", 1)[1].strip()).group()
            needs.append(re.sub(r"[-_.]+", "-", name).lower())
    print(f"{wheel.name}: requires {', '.join(needs) or 'nothing'}")
    missing += [f"{wheel.name} requires {name}" for name in needs if name not in known]
if missing:
    sys.exit("error: the GPU image lacks what " + "; ".join(missing))
PY
du -ch "$WHEELS"/*.whl
