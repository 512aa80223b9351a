#!/usr/bin/env bash
# Runs the test binaries that `cargo test --no-run --message-format=json` built (the file
# given), several side by side: most of their time is waiting on container engines, Hermes
# and timers, not CPU. Each binary's output is printed whole when it ends, with its time;
# the exit status is non-zero when any test failed. YY_TEST_LANES sets how many run at once
# (default 4); a binary's own tests still run on its default number of threads.
set -euo pipefail
cd "$(dirname "$0")/.."
artifacts=${1:?usage: scripts/run-tests.sh ARTIFACTS.json}
lanes=${YY_TEST_LANES:-4}
logs=$(mktemp -d "${TMPDIR:-/tmp}/yy-tests.XXXXXX")
trap 'rm -rf "$logs"' EXIT
# Artifacts built as tests that have an executable: the lib's and bin's unit tests and
# every tests/*.rs. cargo writes one JSON object per line.
mapfile -t binaries < <(grep -E '"profile":\{[^}]*"test":true' "$artifacts" \
    | grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | sort -u)
if [ "${#binaries[@]}" -eq 0 ]; then
    echo "error: no test binary listed in $artifacts; build them with cargo test --no-run --message-format=json" >&2
    exit 1
fi
# Binaries that assert on the engine's global state (every image there is) run alone, after
# the others.
alone=(image_lock)
# The slowest first (measured; see docs/benchmarks.md, "CI time"), so the lanes end together.
slow=(teams sessions desktop worker team_tools_scope computer_idle readme artifacts)
ordered=()
for name in "${slow[@]}"; do
    for exe in "${binaries[@]}"; do
        [[ "$(basename "$exe")" == "$name"-* ]] && ordered+=("$name" "$exe")
    done
done
for exe in "${binaries[@]}"; do
    name=$(basename "$exe")
    name=${name%-*}
    [[ " ${slow[*]} ${alone[*]} " == *" $name "* ]] || ordered+=("$name" "$exe")
done
last=()
for name in "${alone[@]}"; do
    for exe in "${binaries[@]}"; do
        [[ "$(basename "$exe")" == "$name"-* ]] && last+=("$name" "$exe")
    done
done
run_one() {
    local name=$1 exe=$2 log="$logs/${1//:/-}-${2##*/}.log" began rc=0
    shift 2
    began=$(date +%s)
    "$exe" "$@" >"$log" 2>&1 </dev/null || rc=$?
    local verdict="ok"
    [ "$rc" -eq 0 ] || verdict="FAILED (exit $rc)"
    {
        flock 9
        echo "== test binary $name: $verdict in $(( $(date +%s) - began )) s"
        cat "$log"
    } 9>"$logs/print.lock"
    if [ "$rc" -ne 0 ]; then
        echo "$name" >>"$logs/failed"
        cp "$log" "$logs/failed-${name//:/-}.log"
    fi
    return 0
}
export -f run_one
export logs
printf '%s\0' "${ordered[@]}" | xargs -0 -n 2 -P "$lanes" bash -c 'run_one "$@"' _
[ "${#last[@]}" -eq 0 ] || printf '%s\0' "${last[@]}" | xargs -0 -n 2 -P 1 bash -c 'run_one "$@"' _

# The PostgreSQL pass (issue 27): the same control plane on PostgreSQL. The store's unit
# tests run in a scratch cluster made here; the integration binaries that drive the
# control plane run with YY_TEST_DATABASE=postgres (each process makes its own cluster).
# YY_TEST_POSTGRES_BIN names PostgreSQL's programs (scripts/install-postgres.sh).
if [ -n "${YY_TEST_POSTGRES_BIN:-}" ]; then
    postgres_pass=(sessions teams foundation runner artifacts computer_control computer_shell
        computer_share team_tools_scope metrics rotate session_move connection_cap tls)
    pg=()
    for name in "${postgres_pass[@]}"; do
        for exe in "${binaries[@]}"; do
            [[ "$(basename "$exe")" == "$name"-* ]] && pg+=("pg:$name" "$exe")
        done
    done
    # The lib's unit tests (the artifact of kind "lib" built as a test).
    lib=$(grep -E '"profile":\{[^}]*"test":true' "$artifacts" | grep '"kind":\["lib"\]' \
        | grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | head -n 1)
    # Its own directory: the postgres user must reach it, and $logs is root's alone.
    pgdir=$(mktemp -d "${TMPDIR:-/tmp}/yy-pg.XXXXXX")
    trap 'scripts/pg-scratch.sh stop "$pgdir" >/dev/null 2>&1 || true; rm -rf "$logs"' EXIT
    scratch=$(scripts/pg-scratch.sh start "$pgdir")
    YY_TEST_STORE_POSTGRES=$scratch run_one "pg:store" "$lib" server::store::
    printf '%s\0' "${pg[@]}" | YY_TEST_DATABASE=postgres xargs -0 -n 2 -P "$lanes" \
        bash -c 'run_one "$@"' _
fi
if [ -s "$logs/failed" ]; then
    # Once more at the end, without backtraces, where a reader of the output's tail sees it.
    while read -r name; do
        echo "== why $name failed"
        awk '/^failures:$/ { on = 1 } on && !/^ +([0-9]+: |at )/ { print } /^test result:/ { on = 0 }' \
            "$logs/failed-${name//:/-}.log" | head -n 200
    done <"$logs/failed"
    echo "== failed test binaries: $(tr '\n' ' ' <"$logs/failed")"
    exit 1
fi
echo "== all ${#binaries[@]} test binaries passed"
