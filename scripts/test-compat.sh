#!/usr/bin/env bash
# Runs the era-sensitive tests (scripts/envs.sh) once per pymongo era given as arguments, each in
# its own virtualenv under .venv-compat/ built by $PYTHON, with Motor 3.7 installed beside it.
# Every era runs even if an earlier one fails; the script exits non-zero if any failed. Eras named
# in COMPAT_SKIP are left out with one line (CI: the pymongo `make test` has just run in full).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
source scripts/envs.sh
for version in "$@"; do
    if [[ " ${COMPAT_SKIP:-} " == *" $version "* ]]; then
        envs_summaries+=("pymongo $version: left out (COMPAT_SKIP)")
        continue
    fi
    env=".venv-compat/pymongo-$version"
    envs_prepare "$env" "$PYTHON" "pymongo $version" "pymongo==$version" || continue
    envs_run "$env" "pymongo $version"
done
envs_report test-compat || exit 1
