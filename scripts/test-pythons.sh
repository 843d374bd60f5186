#!/usr/bin/env bash
# Runs the era-sensitive tests (scripts/envs.sh) once per Python given as arguments (3.9 3.10 ...),
# each in its own virtualenv under .venv-py/, with the newest pymongo that Python can install
# (pip resolves it when the virtualenv is built: `make clean` or removing .venv-py/3.X picks up a
# newer one) and Motor 3.7. An interpreter is looked for as on a contributor's machine: python3.X
# on PATH, then pyenv's versions (<root>/versions/3.X.*, newest patch first; the root from
# `pyenv root`, else $PYENV_ROOT, else ~/.pyenv). A Python that is not found is skipped with one line; every Python found
# runs even if an earlier one fails, and the script exits non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/envs.sh

# find_python 3.X: prints the path of a working Python 3.X interpreter, or fails. A pyenv shim on
# PATH answers for every installed version but fails for one that is not selected, so each
# candidate is asked its version rather than trusted.
find_python() {
    local version=$1 root candidate
    local check='import sys; sys.exit(".".join(map(str, sys.version_info[:2])) != sys.argv[1])'
    candidate=$(command -v "python$version") \
        && "$candidate" -c "$check" "$version" > /dev/null 2>&1 && { echo "$candidate"; return 0; }
    root=$(pyenv root 2> /dev/null) || root=${PYENV_ROOT:-$HOME/.pyenv}
    while read -r candidate; do
        [ -n "$candidate" ] && "$candidate" -c "$check" "$version" > /dev/null 2>&1 \
            && { echo "$candidate"; return 0; }
    done < <(ls -d "$root/versions/$version".*/bin/"python$version" 2> /dev/null | sort -V -r)
    return 1
}

missing=()
for version in "$@"; do
    if ! python=$(find_python "$version"); then
        echo "test-pythons: skipping Python $version: no python$version on PATH nor in pyenv's versions"
        missing+=("$version")
        continue
    fi
    env=".venv-py/$version"
    envs_prepare "$env" "$python" "Python $version" || continue
    envs_run "$env" "Python $version"
done
[ ${#missing[@]} -eq 0 ] || envs_summaries+=("not found, skipped: Python ${missing[*]}")
envs_report test-pythons || exit 1
