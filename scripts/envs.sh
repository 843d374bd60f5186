# Shared by scripts/test-compat.sh (one virtualenv per pymongo era) and scripts/test-pythons.sh
# (one per Python): builds a virtualenv, installs the package into it, runs the era-sensitive tests
# there and keeps a one-line summary per environment. Sourced, not run.
#
# The era-sensitive tests: the core, the adapters and the switch (tests/unit, tests/integration),
# the unified suites (tests/spec), the README and docs examples and the pytest plugin. The
# embedded server, simulator and bench tests do not depend on the client's era; `make test` runs
# them with the newest pymongo. COMPAT_TESTS overrides the selection; PYTEST_ARGS adds arguments
# to every pytest run (e.g. PYTEST_ARGS="-x" or a plugin's options). The tests run in
# PYTEST_WORKERS pytest-xdist workers (3; 0 runs them in one process).
default_tests="tests/unit tests/integration tests/spec tests/test_readme.py"
default_tests+=" tests/test_docs.py tests/test_pytest_plugin.py"
read -r -a envs_tests <<< "${COMPAT_TESTS:-$default_tests}"
read -r -a envs_pytest_args <<< "${PYTEST_ARGS:-}"
envs_failed=()
envs_summaries=()

# envs_prepare ENV PYTHON LABEL [REQUIREMENT...]: ENV is a virtualenv built by PYTHON, with the
# package (extras test, motor, server, demo) and REQUIREMENTs installed in one pip run; it is
# reinstalled when pyproject.toml is newer than its stamp. On failure, records LABEL as failed.
envs_prepare() {
    local env=$1 python=$2 label=$3
    shift 3
    if [ ! -x "$env/bin/python" ]; then
        if ! { "$python" -m venv "$env" && "$env/bin/python" -m pip install -q --upgrade pip; }; then
            envs_failed+=("$label(venv)")
            return 1
        fi
    fi
    if [ ! -f "$env/.installed" ] || [ pyproject.toml -nt "$env/.installed" ]; then
        if ! "$env/bin/python" -m pip install -q -e '.[test,motor,server,demo]' "$@"; then
            envs_failed+=("$label(install)")
            return 1
        fi
        touch "$env/.installed"
    fi
}

# envs_run ENV LABEL: runs the tests with ENV's Python, printing a header with its Python, pymongo
# and Motor versions, and records pytest's last line (passed, skipped, time) and the CPU time the
# run used (user + system: what the run costs, whatever else the machine is doing) under LABEL.
envs_run() {
    local env=$1 label=$2 versions status summary cpu TIMEFORMAT='%U %S'
    versions=$("$env/bin/python" -c 'import platform, motor, pymongo
print(f"Python {platform.python_version()}, pymongo {pymongo.version}, motor {motor.version}")')
    echo "=== $label: $versions"
    { time "$env/bin/python" -m pytest -q -p no:cacheprovider \
        -n "${PYTEST_WORKERS:-3}" --dist worksteal "${envs_pytest_args[@]}" \
        "${envs_tests[@]}" 2>&1; } 2> "$env/cpu-time" | tee "$env/pytest.log"
    status=${PIPESTATUS[0]}
    summary=$(tail -n 1 "$env/pytest.log" | tr -d '=' | sed 's/^ *//; s/ *$//')
    cpu=$(awk '{ printf "%.0f", $1 + $2 }' "$env/cpu-time")
    envs_summaries+=("$label: $versions: $summary, CPU ${cpu}s")
    [ "$status" -eq 0 ] || envs_failed+=("$label")
}

# envs_report NAME: prints every summary line, then NAME's verdict; returns non-zero if any
# environment failed.
envs_report() {
    local name=$1 line
    for line in "${envs_summaries[@]}"; do
        echo "$name: $line"
    done
    if [ ${#envs_failed[@]} -gt 0 ]; then
        echo "$name: FAILED for ${envs_failed[*]}"
        return 1
    fi
    echo "$name: all passed"
}
