#!/usr/bin/env bash
# Rerunnable measurement of the release binary: size, idle memory, and the
# latency of GET /v1/organizations under a small local load (wrk).
#
#   benches/http_load.sh                      # embedded SQLite
#   SLUICE_DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench benches/http_load.sh
#
# Needs: a release build (cargo build --release) and wrk (apt-get install wrk).
# Knobs: DURATION (15s), CONNECTIONS (16), THREADS (2), ORGS (10).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release/sluice}
DURATION=${DURATION:-15s}
CONNECTIONS=${CONNECTIONS:-16}
THREADS=${THREADS:-2}
ORGS=${ORGS:-10}
PORT=${PORT:-18088}
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk"; exit 1; }
[ -x "$BIN" ] || { echo "no release binary at $BIN: cargo build --release"; exit 1; }

work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"
export SLUICE_LISTEN=127.0.0.1:$PORT RUST_LOG=warn
"$BIN" serve > server.log 2>&1 &
pid=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/v1/health" >/dev/null && break; sleep 0.1; done

sleep 2
echo "binary: $(stat -c %s "$BIN") bytes ($(du -h "$BIN" | cut -f1))"
echo "idle RSS after start: $(grep VmRSS /proc/$pid/status | awk '{print $2, $3}')"

token=$("$BIN" token --email bench@example.com)
for i in $(seq 1 "$ORGS"); do
    curl -sf -o /dev/null "http://127.0.0.1:$PORT/v1/organizations" -H "Authorization: Bearer $token" \
        -H 'Content-Type: application/json' -d "{\"name\": \"Bench $i\"}"
done
echo "backend: ${SLUICE_DATABASE_URL:-sqlite (embedded default)}; $ORGS organizations; wrk -t$THREADS -c$CONNECTIONS -d$DURATION"
wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -H "Authorization: Bearer $token" \
    "http://127.0.0.1:$PORT/v1/organizations" | sed -n '/Latency Distribution/,/Transfer/p'
echo "RSS after load: $(grep VmRSS /proc/$pid/status | awk '{print $2, $3}')"
sleep 3
echo "RSS idle again: $(grep VmRSS /proc/$pid/status | awk '{print $2, $3}')"
