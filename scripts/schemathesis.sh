#!/usr/bin/env bash
# Property-based API testing from the OpenAPI document (dataplane/src/http/openapi.json,
# served at GET /v1/openapi.json) with schemathesis (PyPI), against a secured `narad dev`
# on a free port with a fresh data directory.
#
# Every operation of the document is tested, in the examples, coverage and fuzzing
# phases, positive and negative data, with these checks on every response:
#   not_a_server_error           no 5xx (and no crash: a dead server fails every check)
#   status_code_conformance      the status is one the operation documents
#   content_type_conformance     the Content-Type is the one documented for that status
#   response_schema_conformance  the body validates against the documented schema
# (response_headers_conformance, negative_data_rejection and the stateful checks are
# left out: the API accepts more than the document's types say in places, e.g. a
# `partition` past the topic's count is a 400 rather than a schema rule.)
#
# Needs: python3 with venv and pip (schemathesis is installed into SCHEMATHESIS_VENV,
# default ~/.cache/narad/schemathesis-venv, when missing), a built `narad` (NARAD_BIN,
# default $CARGO_TARGET_DIR/debug/narad; built with cargo when missing).
# SCHEMATHESIS_MAX_EXAMPLES bounds the test cases per operation (default 30: the run
# takes about two minutes on two cores). When pip cannot install schemathesis the step
# says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${SCHEMATHESIS_VENV:-$HOME/.cache/narad/schemathesis-venv}
version=${SCHEMATHESIS_VERSION:-4.32.5}
max_examples=${SCHEMATHESIS_MAX_EXAMPLES:-30}
narad_bin=${NARAD_BIN:-${CARGO_TARGET_DIR:-target}/debug/narad}
document=$PWD/dataplane/src/http/openapi.json
st="$venv/bin/schemathesis"

if [[ ! -x "$st" ]] || [[ "$("$st" --version 2>/dev/null)" != *"$version"* ]]; then
    echo "schemathesis: installing schemathesis==$version into $venv"
    if ! { python3 -m venv "$venv" && "$venv/bin/pip" install --quiet "schemathesis==$version"; }; then
        echo "schemathesis: SKIPPED: pip could not install schemathesis==$version (no PyPI?)"
        exit 0
    fi
fi
"$st" --version

if [[ ! -x "$narad_bin" ]]; then
    cargo build --locked -p narad --bin narad
fi

work=$(mktemp -d)
cleanup() {
    if [[ -n "${narad_pid:-}" ]]; then
        kill -TERM "$narad_pid" 2>/dev/null || true
        wait "$narad_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
password=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
base="http://127.0.0.1:$port"
NARAD_ADMIN_PASSWORD="$password" "$narad_bin" dev --secure --port "$port" \
    --data-dir "$work/data" 2>"$work/narad.log" &
narad_pid=$!
ready=""
for _ in $(seq 1 300); do
    if curl -fsS "$base/readyz" >/dev/null 2>&1; then ready=1; break; fi
    sleep 0.1
done
if [[ -z "$ready" ]]; then
    echo "schemathesis: narad dev never became ready"
    cat "$work/narad.log"
    exit 1
fi

# The document's path examples name these: a topic with a message waiting and a user,
# so that the examples phase reaches the success answers too.
api() { curl -sS -o /dev/null -w '%{http_code}' -u "admin:$password" -H 'Content-Type: application/json' "$@"; }
api -X POST "$base/v1/topics" -d '{"name":"orders"}' >/dev/null
api -X POST "$base/v1/topics" -d '{"name":"audit"}' >/dev/null
api -X POST "$base/v1/topics/orders/children" -d '{"child":"audit"}' >/dev/null
for n in 1 2 3; do api -X POST "$base/v1/topics/orders/produce?key=k$n" -d "{\"n\":$n}" >/dev/null; done
api -X POST "$base/v1/users" -d '{"username":"reader","password":"reader-pw","grants":[{"action":"consume","patterns":["*"]}]}' >/dev/null

report_dir=$(realpath -m "${SCHEMATHESIS_REPORT_DIR:-$work/report}")
started=$(date +%s)
# From the temporary directory: schemathesis keeps its state in ./.schemathesis.
run_schemathesis() {
    (cd "$work" && "$st" run "$document" \
        --url "$base" \
        --auth "admin:$password" \
        --checks "${SCHEMATHESIS_CHECKS:-not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance}" \
        --phases examples,coverage,fuzzing \
        --max-examples "$max_examples" \
        --seed "${SCHEMATHESIS_SEED:-1}" \
        --workers 2 \
        --request-timeout 20 \
        --generation-database none \
        --no-color \
        --report junit --report-dir "$report_dir") 2>&1 | tee "$work/schemathesis.out"
    return "${PIPESTATUS[0]}"
}
status=0
run_schemathesis || status=$?
# schemathesis can fail inside its own case generation (a hypothesis
# FlakyFailure raised while drawing a case, reported as "Runtime Error"),
# with no check failed against narad. Only then is the run repeated, once;
# a failed check is never retried.
if [[ $status -ne 0 ]] && grep -q "Runtime Error" "$work/schemathesis.out" \
    && ! grep -q "FAILURES" "$work/schemathesis.out"; then
    echo "schemathesis: the tool failed while generating cases (no check failed); running it once more"
    status=0
    run_schemathesis || status=$?
fi
echo "schemathesis: $(( $(date +%s) - started )) s"

if ! kill -0 "$narad_pid" 2>/dev/null; then
    echo "schemathesis: narad dev died during the run"
    status=1
fi
if [[ $status -ne 0 ]]; then
    echo "--- narad dev log (last 100 lines) ---"
    tail -n 100 "$work/narad.log"
fi
exit $status
