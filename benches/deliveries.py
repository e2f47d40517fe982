#!/usr/bin/env python3
"""Notification deliveries from the outbox, measured through the service.

Starts the release binary on a fresh SQLite store (or SLUICE_DATABASE_URL),
a local receiver, and an organization with a webhook rule, then:

1. throughput: records N events through POST /v1/internal/notifications
   and times until the receiver has every delivery (deliveries per second);
2. a dead receiver: a rule whose receiver accepts connections and never
   answers; while its deliveries time out, API latency (GET of the
   organization) and a sync's duration are measured and compared with the
   same measurements before any delivery was queued.

Usage: cargo build --release && benches/deliveries.py [N]
"""
import json, os, socket, statistics, subprocess, sys, tempfile, threading, time, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "sluice")

received = 0
lock = threading.Lock()

class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        global received
        self.rfile.read(int(self.headers.get("content-length", 0)))
        with lock:
            received += 1
        self.send_response(204)
        self.end_headers()
    def log_message(self, *a):
        pass

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def call(method, url, token=None, body=None, headers=None):
    h = {"content-type": "application/json"}
    if token: h["authorization"] = f"Bearer {token}"
    h.update(headers or {})
    req = urllib.request.Request(url, method=method, headers=h, data=json.dumps(body).encode() if body is not None else None)
    with urllib.request.urlopen(req, timeout=30) as r:
        data = r.read()
        return json.loads(data) if data else None

def main():
    rx = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=rx.serve_forever, daemon=True).start()
    # A receiver that accepts and never answers: every attempt times out.
    dead = socket.socket(); dead.bind(("127.0.0.1", 0)); dead.listen(1024)
    data = tempfile.mkdtemp(prefix="sluice-bench-deliveries-")
    port = free_port()
    env = dict(os.environ, SLUICE_LISTEN=f"127.0.0.1:{port}", SLUICE_DATA_DIR=data,
               SLUICE_DATABASE_URL=os.environ.get("SLUICE_DATABASE_URL", f"sqlite://{data}/meta.db?mode=rwc"),
               SLUICE_INTERNAL_API_KEY="bench", SLUICE_WEBHOOK_ALLOW_PRIVATE="true", SLUICE_RATE_LIMITS="off",
               RUST_LOG="warn")
    server = subprocess.Popen([BIN, "serve"], env=env, cwd=data, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                call("GET", f"{base}/v1/health"); break
            except Exception:
                time.sleep(0.1)
        token = subprocess.check_output([BIN, "token", "--email", "bench@example.com"], env=env, cwd=data).decode().strip()
        org = call("POST", f"{base}/v1/organizations", token, {"name": "Bench"})["id"]
        call("POST", f"{base}/v1/organizations/{org}/rules", token,
             {"name": "live", "event": "connection.failing", "channel": {"type": "webhook", "url": f"http://127.0.0.1:{rx.server_port}/in"}})
        call("POST", f"{base}/v1/organizations/{org}/rules", token,
             {"name": "dead", "event": "schema.drift", "channel": {"type": "webhook", "url": f"http://127.0.0.1:{dead.getsockname()[1]}/in"}})
        notify = lambda event: call("POST", f"{base}/v1/internal/notifications", body={"organization_id": org, "event": event, "message": "m"}, headers={"x-internal-api-key": "bench"})

        # A file-to-file flow whose run time is measured.
        files = os.path.join(data, "files", org, "in"); os.makedirs(files)
        with open(os.path.join(files, "rows.jsonl"), "w") as f:
            for i in range(200_000):
                f.write(json.dumps({"id": i, "name": f"row {i}"}) + "\n")
        conn = call("POST", f"{base}/v1/organizations/{org}/connections", token,
                    {"name": "in", "type": "file", "capability": "both", "config": {"path": "in", "format": "jsonl"}})["id"]
        flow = call("POST", f"{base}/v1/organizations/{org}/flows", token,
                    {"name": "copy", "source_connection_id": conn, "destination_connection_id": conn,
                     "config": {"mappings": [{"source_entity": "rows", "dest_entity": "copy", "sync_mode": "full_refresh_overwrite"}]}})["id"]

        def run_seconds():
            run = call("POST", f"{base}/v1/organizations/{org}/flows/{flow}/run", token, {})["id"]
            while True:
                r = call("GET", f"{base}/v1/organizations/{org}/runs/{run}", token)
                if r["status"] not in ("queued", "running"):
                    assert r["status"] == "succeeded", r
                    return (time_of(r["finished_at"]) - time_of(r["started_at"]))
                time.sleep(0.05)

        def latency_ms(n=300):
            out = []
            for _ in range(n):
                t = time.perf_counter(); call("GET", f"{base}/v1/organizations/{org}", token); out.append((time.perf_counter() - t) * 1000)
            out.sort()
            return out[len(out) // 2], out[int(len(out) * 0.99) - 1]

        before_lat = latency_ms(); before_run = statistics.median([run_seconds() for _ in range(3)])

        t0 = time.perf_counter()
        for _ in range(N):
            notify("connection.failing")
        queued = time.perf_counter() - t0
        while True:
            with lock:
                if received >= N: break
            time.sleep(0.01)
        total = time.perf_counter() - t0
        print(f"throughput: {N} events recorded in {queued:.2f} s; all {N} delivered {total:.2f} s after the first: {N / total:.0f} deliveries/s")

        for _ in range(200):
            notify("schema.drift")
        time.sleep(1)
        during_lat = latency_ms(); during_run = statistics.median([run_seconds() for _ in range(3)])
        print(f"API latency GET organization p50/p99: {before_lat[0]:.2f}/{before_lat[1]:.2f} ms without deliveries, "
              f"{during_lat[0]:.2f}/{during_lat[1]:.2f} ms while 200 deliveries to a dead receiver time out")
        print(f"sync of 200,000 rows (median of 3): {before_run:.2f} s before, {during_run:.2f} s while they time out")
    finally:
        server.terminate(); server.wait()

def time_of(s):
    from datetime import datetime
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()

if __name__ == "__main__":
    main()
