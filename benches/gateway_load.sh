#!/usr/bin/env bash
# Rerunnable HTTP load measurement of POST /v1/gateway/validate on the release
# binary: the corpus's 10-field contract as a catalog asset, the fenced messy
# 1 KiB reply (crates/domain/benches/gateway_corpus.json, case messy_1kib) as
# the payload, an organization API key, wrk on the same machine.
#
#   benches/gateway_load.sh                   # embedded SQLite
#   SLUICE_DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench benches/gateway_load.sh
#
# The organization is put on the enterprise plan (unlimited validations) by a
# direct UPDATE of the metadata store, as billing would; every request is still
# metered. Afterwards the script checks that the stored monthly count equals
# the number of validations wrk completed (non-2xx answers would show in wrk's
# output and fail the check).
#
# With HOSTILE=N, N more clients post a 4 MiB hostile payload (`{[` repeated,
# which took minutes before extraction was linear) in a loop while wrk
# measures: compare wrk's p99 with a run without them.
#
# Needs: a release build (cargo build --release), wrk, python3, sqlite3 or psql.
# Knobs: DURATION (15s), WARMUP (2s), CONNECTIONS (16), THREADS (2), CASE (messy_1kib), HOSTILE (0).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release/sluice}
case "$BIN" in /*) ;; *) BIN=$root/$BIN ;; esac
DURATION=${DURATION:-15s}
WARMUP=${WARMUP:-2s}
CONNECTIONS=${CONNECTIONS:-16}
THREADS=${THREADS:-2}
CASE=${CASE:-messy_1kib}
HOSTILE=${HOSTILE:-0}
PORT=${PORT:-18089}
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk"; exit 1; }
[ -x "$BIN" ] || { echo "no release binary at $BIN: cargo build --release"; exit 1; }

work=$(mktemp -d)
pid=
hostile_pids=()
trap '[ ${#hostile_pids[@]} -gt 0 ] && kill "${hostile_pids[@]}" 2>/dev/null; [ -n "$pid" ] && { kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; }; rm -rf "$work"' EXIT
cd "$work"
export SLUICE_LISTEN=127.0.0.1:$PORT RUST_LOG=warn
"$BIN" serve --no-worker > server.log 2>&1 &
pid=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/v1/health" >/dev/null && break; sleep 0.1; done
base=http://127.0.0.1:$PORT/v1

token=$("$BIN" token --email bench@example.com)
json() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
org=$(curl -sf "$base/organizations" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d '{"name": "Gateway bench"}' | json '["id"]')
python3 - "$root/crates/domain/benches/gateway_corpus.json" "$CASE" <<'EOF' > asset.json
import json, sys
corpus = json.load(open(sys.argv[1]))
print(json.dumps({"name": "customer", "fields": corpus["contract"]}))
raw = next(c["raw"] for c in corpus["cases"] if c["name"] == sys.argv[2])
open("payload.txt", "w").write(raw)
EOF
asset=$(curl -sf "$base/organizations/$org/data-assets" -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' -d @asset.json | json '["id"]')
key=$(curl -sf "$base/organizations/$org/api-keys" -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' -d '{"name": "gateway-bench", "roles": ["Viewer"]}' | json '["key"]')

db_url=${SLUICE_DATABASE_URL:-}
sql() {
    if [ -z "$db_url" ]; then sqlite3 sluice.db "$1"; else psql -qtA "$db_url" -c "$1"; fi
}
sql "UPDATE organizations SET plan = 'enterprise'" >/dev/null
# A change made behind the service's back is seen once its one-second read
# cache of the plan (filled when the asset was created) has expired.
sleep 1.2

python3 - "$asset" "$key" <<'EOF' > post.lua
import json, sys
body = json.dumps({"asset_id": sys.argv[1], "payload_raw": open("payload.txt").read()})
lua = lambda s: '"' + s.replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n') + '"'
print('wrk.method = "POST"')
print('wrk.body = ' + lua(body))
print('wrk.headers["Content-Type"] = "application/json"')
print('wrk.headers["X-Api-Key"] = ' + lua(sys.argv[2]))
EOF
# One request by hand: it must validate, and the answer is shown.
curl -sf "$base/gateway/validate" -H "X-Api-Key: $key" -H 'Content-Type: application/json' \
    -d "$(python3 -c "import json; print(json.dumps({'asset_id': '$asset', 'payload_raw': open('payload.txt').read()}))")" \
    > first.json || { echo "the first validation failed:"; cat first.json; cat server.log; exit 1; }
echo "case $CASE: $(wc -c < payload.txt) bytes of payload; answer: $(head -c 160 first.json)…"
echo "backend: ${db_url:-sqlite (embedded default)}; wrk -t$THREADS -c$CONNECTIONS -d$DURATION; idle RSS $(grep VmRSS /proc/$pid/status | awk '{print $2, $3}')"

# A short warm-up (pool connections opened, caches filled), then the measurement.
wrk -t"$THREADS" -c"$CONNECTIONS" -d"$WARMUP" -s post.lua "$base/gateway/validate" > warmup.out
if [ "$HOSTILE" -gt 0 ]; then
    python3 -c "import json; print(json.dumps({'asset_id': '$asset', 'payload_raw': '{[' * (2 * 1024 * 1024 - 64)}))" > hostile.json
    for i in $(seq 1 "$HOSTILE"); do
        ( while :; do
              curl -s -o /dev/null -w '%{http_code} %{time_total}\n' "$base/gateway/validate" -H "X-Api-Key: $key" \
                  -H 'Content-Type: application/json' --data-binary @hostile.json >> "hostile.$i.out"
          done ) &
        hostile_pids+=($!)
    done
    echo "$HOSTILE hostile client(s) posting $(wc -c < hostile.json) bytes of {[ in a loop"
fi
ticks() { awk '{print $14 + $15}' /proc/$pid/stat; }
t0=$(ticks)
wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s post.lua "$base/gateway/validate" | tee wrk.out \
    | sed -n '/Latency Distribution/,/Transfer/p'
t1=$(ticks)
if [ "$HOSTILE" -gt 0 ]; then
    kill "${hostile_pids[@]}" 2>/dev/null; wait "${hostile_pids[@]}" 2>/dev/null || true; hostile_pids=()
    cat hostile.*.out > hostile.out
    echo "hostile requests answered: $(wc -l < hostile.out) ($(awk '{print $1}' hostile.out | sort | uniq -c | tr '\n' ' ')); \
time each: $(awk '{s+=$2; if ($2>m) m=$2} END {if (NR) printf "mean %.1f ms, max %.1f ms", s/NR*1000, m*1000}' hostile.out)"
fi
echo "server CPU: $(( (t1 - t0) * 1000000 / $(getconf CLK_TCK) / $(awk '/requests in/ {print $1}' wrk.out) )) µs per request"
echo "RSS after load: $(grep VmRSS /proc/$pid/status | awk '{print $2, $3}')"

# The meter: every answered request is counted once (the first by hand, plus wrk's).
sleep 1
done_by_wrk=$(( $(awk '/requests in/ {print $1}' warmup.out) + $(awk '/requests in/ {print $1}' wrk.out) ))
# The hostile requests that reached the gateway were counted too (a
# request cut short when its client was stopped may or may not have been).
hostile_done=$( [ -f hostile.out ] && grep -c '^422' hostile.out || echo 0 )
done_by_wrk=$(( done_by_wrk + hostile_done ))
if grep -q "Non-2xx" wrk.out warmup.out; then echo "FAIL: non-2xx answers: $(grep -h Non-2xx wrk.out warmup.out)"; exit 1; fi
counted=$(sql "SELECT sum(count) FROM validation_counts" | head -1)
echo "validations counted by the store: $counted; answered: $((done_by_wrk + 1))"
# wrk drops the requests in flight when it stops: the server counted those too.
[ "$counted" -ge "$((done_by_wrk + 1))" ] || { echo "FAIL: the meter lost validations"; exit 1; }
[ "$counted" -le "$((done_by_wrk + 1 + 2 * CONNECTIONS + HOSTILE))" ] || { echo "FAIL: the meter counted more than it answered"; exit 1; }
