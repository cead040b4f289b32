#!/usr/bin/env bash
# Runs the official Go client's integration suite (github.com/debanganthakuria/narad-go,
# `go test -tags integration`) against a secured `narad dev`, when the Go module proxy
# serves the module. When it does not, says so and exits 0: the same checks run as Rust
# tests in tests/tests/conformance.rs (part of `cargo test --workspace`).
#
# Needs: go on PATH, a built `narad` binary (NARAD_BIN, default target/debug/narad).
# NARAD_GO_VERSIONS lists the versions to try, newest first.
set -euo pipefail
cd "$(dirname "$0")/.."

module=github.com/debanganthakuria/narad-go
versions=${NARAD_GO_VERSIONS:-"latest v0.2.0"}
narad_bin=${NARAD_BIN:-target/debug/narad}

if ! command -v go >/dev/null 2>&1; then
    echo "go-conformance: no go on PATH; the Rust conformance tests cover wire contract §13"
    exit 0
fi

work=$(mktemp -d)
cleanup() {
    if [[ -n "${narad_pid:-}" ]]; then kill -TERM "$narad_pid" 2>/dev/null || true; wait "$narad_pid" 2>/dev/null || true; fi
    chmod -R u+w "$work" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

source_dir=""
refusal=""
for version in $versions; do
    if json=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "$module@$version" 2>/dev/null); then
        source_dir=$(printf '%s' "$json" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("Dir",""))')
        [[ -n "$source_dir" ]] && { echo "go-conformance: $module@$version from the module proxy"; break; }
    else
        refusal=$(printf '%s' "$json" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("Error","").splitlines()[0])' 2>/dev/null || true)
    fi
done
if [[ -z "$source_dir" ]]; then
    echo "go-conformance: the Go module proxy does not serve $module (tried: $versions): ${refusal:-no answer}"
    echo "go-conformance: skipped, the Rust conformance tests (tests/tests/conformance.rs) cover wire contract §13"
    exit 0
fi

cp -r "$source_dir" "$work/narad-go"
chmod -R u+w "$work/narad-go"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
password=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
NARAD_ADMIN_PASSWORD="$password" "$narad_bin" dev --secure --port "$port" \
    --data-dir "$work/data" 2>"$work/narad.log" &
narad_pid=$!
for _ in $(seq 1 300); do
    if curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then break; fi
    sleep 0.1
done
curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null || { cat "$work/narad.log"; exit 1; }

cd "$work/narad-go"
NARAD_ADDR="http://127.0.0.1:$port" NARAD_USER=admin NARAD_PASSWORD="$password" \
    go test -tags integration -count=1 -v ./...
