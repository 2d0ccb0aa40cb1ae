#!/bin/sh
# Run the unit-test suites given as arguments (and the replays of the fuzz
# corpus, tests/fuzz/replay.c), then the integration tests,
# and print one closing line: "N passed, N failed".
# BUILD names the build directory; UNIT_ONLY=1 skips the integration tests;
# VALGRIND=1 runs every unit suite and every daemon under valgrind;
# PACKAGING=1 also runs tests/install.sh (make install) and tests/packages.sh
# (the Debian packages, as root): make check sets it in the normal build, not
# with SAN=1, and check-valgrind does not.
set -u
BUILD=${BUILD:-build}
passed=0
failed=0
status=0
export CK_FORK=yes
wrap=""
if [ "${VALGRIND:-0}" = 1 ]; then
    wrap="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite"
    export CK_FORK=no
    export DLOCKD_WRAPPER="$wrap"
fi

# replay BIN: run a fuzz harness (BIN is replay-NAME) on every input of
# tests/fuzz/corpus/NAME and tests/fuzz/regress/NAME; each input counts as
# one test, all of them failed if the harness fails
replay() {
    name=${1##*/replay-}
    echo "== $1"
    out=$($wrap "$1" "tests/fuzz/corpus/$name" "tests/fuzz/regress/$name" 2>&1)
    rc=$?
    line=$(printf '%s\n' "$out" | grep -E "^replay $name: [0-9]+ inputs" | tail -n 1)
    n=$(echo "$line" | sed -nE 's/.*: ([0-9]+) inputs.*/\1/p')
    if [ $rc -eq 0 ] && [ -n "$n" ]; then
        echo "$line"
        passed=$((passed + n))
    else
        printf '%s\n' "$out" | tail -n 40
        echo "replay $name: FAILED (exit $rc)"
        failed=$((failed + ${n:-1}))
        status=1
    fi
}

for t in "$@"; do
    case "$t" in
    */check_dlock) continue ;;	# needs a daemon: run by the integration tests
    */replay-*) replay "$t"; continue ;;
    esac
    echo "== $t"
    out=$($wrap "$t" 2>&1)
    rc=$?
    printf '%s\n' "$out"
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+%: Checks: [0-9]+' | tail -n 1)
    if [ -n "$line" ]; then
        n=$(echo "$line" | sed -E 's/.*Checks: ([0-9]+).*/\1/')
        f=$(echo "$line" | sed -E 's/.*Failures: ([0-9]+).*/\1/')
        e=$(echo "$line" | sed -E 's/.*Errors: ([0-9]+).*/\1/')
        passed=$((passed + n - f - e))
        failed=$((failed + f + e))
    fi
    if [ $rc -ne 0 ]; then
        status=1
        [ -z "$line" ] && failed=$((failed + 1))
    fi
done

if [ "${UNIT_ONLY:-0}" != 1 ]; then
    echo "== integration"
    out=$(BUILD="$BUILD" sh tests/integration/run.sh 2>&1)
    rc=$?
    printf '%s\n' "$out"
    line=$(printf '%s\n' "$out" | grep -E '^integration: [0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -n "$line" ]; then
        p=$(echo "$line" | sed -E 's/^integration: ([0-9]+) passed.*/\1/')
        f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
        passed=$((passed + p))
        failed=$((failed + f))
    fi
    if [ $rc -ne 0 ]; then
        status=1
        [ -z "$line" ] && failed=$((failed + 1))
    fi
fi

# script NAME: run tests/NAME.sh, which ends with "NAME: N passed, M failed"
script() {
    echo "== tests/$1.sh"
    out=$(sh "tests/$1.sh" 2>&1)
    rc=$?
    printf '%s\n' "$out"
    line=$(printf '%s\n' "$out" | grep -E "^$1: [0-9]+ passed, [0-9]+ failed" | tail -n 1)
    if [ -n "$line" ]; then
        passed=$((passed + $(echo "$line" | sed -E 's/^[^:]*: ([0-9]+) passed.*/\1/')))
        failed=$((failed + $(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')))
    fi
    if [ $rc -ne 0 ]; then
        status=1
        [ -z "$line" ] && failed=$((failed + 1))
    fi
}

if [ "${UNIT_ONLY:-0}" != 1 ]; then
    if [ "${PACKAGING:-0}" = 1 ]; then
        script install
        script packages
    else
        echo "== tests/install.sh, tests/packages.sh: SKIPPED (run by make check in the normal build only, not with SAN=1 or under valgrind)"
    fi
fi

echo "$passed passed, $failed failed"
[ $failed -eq 0 ] || status=1
exit $status
