#!/usr/bin/env bash
# Runs the era-sensitive tests once per supported pymongo era, each in its own virtualenv under
# .venv-compat/, with Motor 3.7 installed beside it: the core, the adapters and the switch
# (tests/unit, tests/integration), the unified suites (tests/spec), the README and docs examples
# and the pytest plugin. The embedded server, simulator and bench tests do not depend on the
# client's era; `make test` runs them with the newest pymongo. COMPAT_TESTS overrides the selection. Every era
# runs even if an earlier one fails; the script exits non-zero if any failed. The tests run in
# PYTEST_WORKERS pytest-xdist workers (3, as in `make test`; 0 runs them in one process).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
default_tests="tests/unit tests/integration tests/spec tests/test_readme.py"
default_tests+=" tests/test_docs.py tests/test_pytest_plugin.py"
read -r -a tests <<< "${COMPAT_TESTS:-$default_tests}"
failed=()
for version in "$@"; do
    env=".venv-compat/pymongo-$version"
    if [ ! -x "$env/bin/python" ]; then
        "$PYTHON" -m venv "$env" && "$env/bin/python" -m pip install -q --upgrade pip || { failed+=("$version(venv)"); continue; }
    fi
    if [ ! -f "$env/.installed" ] || [ pyproject.toml -nt "$env/.installed" ]; then
        "$env/bin/python" -m pip install -q -e '.[test,motor,server,demo]' "pymongo==$version" \
            && touch "$env/.installed" || { failed+=("$version(install)"); continue; }
    fi
    echo "=== pymongo $version ($("$env/bin/python" -c 'import motor; print("motor", motor.version)'))"
    if ! "$env/bin/python" -m pytest -q -p no:cacheprovider -n "${PYTEST_WORKERS:-3}" --dist worksteal \
        "${tests[@]}"; then
        failed+=("$version")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "test-compat: FAILED for pymongo ${failed[*]}"
    exit 1
fi
echo "test-compat: all eras passed ($*)"
