#!/usr/bin/env bash
# Looks ahead: asks the package index for the newest pymongo release and runs the era-sensitive
# tests against it, in .venv-compat/pymongo-<version> (shared with scripts/test-compat.sh). A
# release whose seams the adapters do not know fails first with a readable line naming the release,
# the method and its parameters (backpressure.adapters.seams.signature_report), not with an error
# deep in a test. `scripts/lookahead.sh 4.21.0` checks a given release instead; LOOKAHEAD_PYTHON
# points at an existing interpreter (a scratch venv) instead of building one. The tests run in
# PYTEST_WORKERS pytest-xdist workers (3; 0 runs them in one process).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
index_python=.venv/bin/python
[ -x "$index_python" ] || index_python=$PYTHON
source="the release asked for"
[ $# -gt 0 ] || source="the newest release on the package index"
version=${1:-$("$index_python" -m pip index versions pymongo 2>/dev/null | sed -n 's/^pymongo (\(.*\))$/\1/p' | head -n 1)}
if [ -z "$version" ]; then
    echo "lookahead: the package index named no pymongo release (is it reachable?)"
    exit 1
fi
python=${LOOKAHEAD_PYTHON:-}
if [ -z "$python" ]; then
    # shellcheck source=scripts/envs.sh
    source scripts/envs.sh
    env=".venv-compat/pymongo-$version"
    envs_prepare "$env" "$PYTHON" "pymongo-$version" "pymongo==$version" \
        || { echo "lookahead: could not install pymongo $version"; exit 1; }
    python="$env/bin/python"
fi
echo "lookahead: pymongo $version, $source; testing $("$python" -c 'import pymongo; print(pymongo.version)')"
if ! "$python" -c 'import sys; from backpressure.adapters import seams; sys.exit(seams.print_report())'; then
    echo "lookahead: FAILED: the adapters do not know this pymongo's seams (see above)"
    exit 1
fi
"$python" -m pytest -q -p no:cacheprovider -n "${PYTEST_WORKERS:-3}" --dist worksteal \
    tests/unit/test_seams_signatures.py tests/unit/test_seams_inventory.py \
    tests/integration/test_version_guard.py tests/integration/test_native_forwarding.py \
    tests/integration/test_load_balanced.py tests/integration/test_native_adapter.py \
    tests/integration/test_native_retries.py tests/integration/test_backport_generated.py \
    || { echo "lookahead: FAILED: the era-sensitive tests fail on pymongo $version"; exit 1; }
echo "lookahead: pymongo $version passed"
