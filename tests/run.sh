#!/bin/sh
# Run the unit-test suites given as arguments (and the replays of the fuzz
# corpus, tests/fuzz/replay.c), then the integration tests,
# and print one closing line: "N passed, N failed".
# BUILD names the build directory; UNIT_ONLY=1 skips the integration tests;
# VALGRIND=1 runs every unit suite and every daemon under valgrind, and of
# the integration tests the set tests/integration/runtests.py names for it;
# SAN=1 (the build has ASan/UBSan) runs that script's set for it;
# PACKAGING=1 also runs tests/install.sh (make install) and tests/packages.sh
# (the Debian packages, as root): make check sets it in the normal build, not
# with SAN=1, and check-valgrind does not.
set -u
BUILD=${BUILD:-build}
. "$(dirname "$0")/counts.sh"
passed=0
failed=0
status=0
export CK_FORK=yes
wrap=""
if [ "${VALGRIND:-0}" = 1 ]; then
    wrap="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite"
    export CK_FORK=no
    export DLOCKD_WRAPPER="$wrap"
    export DLOCKD_TEST_SET=valgrind
elif [ "${SAN:-0}" = 1 ]; then
    export DLOCKD_TEST_SET=san
fi

# add STATUS COUNT ARGS...: print the output of a test program ($out),
# which exited with STATUS, and add the counts COUNT ARGS reads off it
# (tests/counts.sh); one that failed without a count is one failure
add() {
    rc=$1
    shift
    printf '%s\n' "$out"
    "$@"
    found=$?
    passed=$((passed + counts_passed))
    failed=$((failed + counts_failed))
    if [ "$rc" -ne 0 ]; then
        status=1
        [ $found -ne 0 ] && failed=$((failed + 1))
    fi
}

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
    */check_dlock | */check_dlock_elect) continue ;;	# need a daemon: run by the integration tests
    */replay-*) replay "$t"; continue ;;
    esac
    echo "== $t"
    out=$($wrap "$t" 2>&1)
    add $? check_counts "$out"
done

# script NAME FILE: run the shell script FILE, which ends with "NAME: N
# passed, M failed"
script() {
    echo "== $2"
    out=$(BUILD="$BUILD" sh "$2" 2>&1)
    add $? summary_counts "$1" "$out"
}

if [ "${UNIT_ONLY:-0}" != 1 ]; then
    script integration tests/integration/run.sh
    if [ "${PACKAGING:-0}" = 1 ]; then
        script install tests/install.sh
        script packages tests/packages.sh
    else
        echo "== tests/install.sh, tests/packages.sh: SKIPPED (run by make check in the normal build only, not with SAN=1 or under valgrind)"
    fi
fi

echo "$passed passed, $failed failed"
[ $failed -eq 0 ] || status=1
exit $status
