#!/usr/bin/env python3
"""How long a run waits in the queue: the time from a run queued through the
API (its `queued_at`) to a worker starting it (its `started_at`), measured on
the release binary with a one-row file-to-file flow, so the run itself is
negligible.

    benches/pickup.py                  # one `sluice serve` on embedded SQLite
    benches/pickup.py --postgres       # one `sluice serve` on PostgreSQL
    benches/pickup.py --postgres --split
        # `sluice serve --no-worker` for the API and a separate
        # `sluice worker`: the run crosses processes (LISTEN/NOTIFY)

Needs a release build (`cargo build --release`); PostgreSQL on 127.0.0.1:5432
(user postgres, trust) for --postgres, where a database `sluice_pickup_<pid>`
is made and dropped. Knobs: --runs N (30), --pause S (seconds between runs,
0.3, so the worker is idle when each run is queued: the case that used to
wait for the next poll).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime

from sluicebench import BIN, Api, wait_healthy


def parse(ts):
    # 2026-11-23T18:24:09.866171Z, to microseconds.
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def psql(sql, db="postgres"):
    env = dict(os.environ, PGOPTIONS="-c client_min_messages=warning")
    subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", db, "-qAtc", sql], check=True, env=env)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--postgres", action="store_true")
    ap.add_argument("--split", action="store_true")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--pause", type=float, default=0.3)
    ap.add_argument("--port", type=int, default=18091)
    args = ap.parse_args()
    if args.split and not args.postgres:
        sys.exit("--split needs --postgres (the embedded store has one process)")
    if not os.access(BIN, os.X_OK):
        sys.exit(f"no release binary at {BIN}: cargo build --release")

    work = tempfile.mkdtemp(prefix="sluice-pickup-")
    db_name = f"sluice_pickup_{os.getpid()}"
    env = dict(os.environ)
    env.update({
        "SLUICE_LISTEN": f"127.0.0.1:{args.port}",
        "SLUICE_DATA_DIR": os.path.join(work, "data"),
        "SLUICE_FILE_ROOT": os.path.join(work, "files"),
        "SLUICE_JWT_HS256_SECRET": "pickup-bench-secret-pickup-bench-secret",
        "SLUICE_MASTER_KEY": "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=",
        "RUST_LOG": "warn",
    })
    if args.postgres:
        psql(f"DROP DATABASE IF EXISTS {db_name}")
        psql(f"CREATE DATABASE {db_name}")
        env["SLUICE_DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{db_name}"
    else:
        env.pop("SLUICE_DATABASE_URL", None)
    procs = []
    try:
        log = open(os.path.join(work, "serve.log"), "w")
        serve = ["serve", "--no-worker"] if args.split else ["serve"]
        procs.append(subprocess.Popen([BIN, *serve], env=env, stdout=log, stderr=log))
        base = f"http://127.0.0.1:{args.port}"
        wait_healthy(base)
        if args.split:
            wlog = open(os.path.join(work, "worker.log"), "w")
            procs.append(subprocess.Popen([BIN, "worker"], env=env, stdout=wlog, stderr=wlog))
            time.sleep(1.0)  # the worker connects and listens
        token = subprocess.run([BIN, "token", "--email", "bench@example.com"], env=env, check=True,
                               capture_output=True, text=True).stdout.strip()
        api = Api(base, token)
        org = api.call("POST", "/v1/organizations", {"name": "Pickup"})["id"]
        src_dir = os.path.join(env["SLUICE_FILE_ROOT"], org, "in")
        os.makedirs(src_dir, exist_ok=True)
        with open(os.path.join(src_dir, "items.jsonl"), "w") as f:
            f.write('{"id": 1}\n')
        conn = lambda name: api.call("POST", f"/v1/organizations/{org}/connections", {
            "name": name, "type": "file", "capability": "both", "config": {"path": name, "format": "jsonl"}})["id"]
        src, dst = conn("in"), conn("out")
        flow = api.call("POST", f"/v1/organizations/{org}/flows", {
            "name": "one row", "source_connection_id": src, "destination_connection_id": dst,
            "config": {"mappings": [{"source_entity": "items", "sync_mode": "full_refresh_overwrite"}]}})["id"]
        waits = []
        for _ in range(args.runs):
            time.sleep(args.pause)
            _, r = api.run(org, flow)
            waits.append((parse(r["started_at"]) - parse(r["queued_at"])).total_seconds() * 1000)
        waits.sort()
        store = "PostgreSQL" if args.postgres else "SQLite"
        shape = "API and worker in two processes" if args.split else "one process"
        p90 = waits[int(len(waits) * 0.9) - 1]
        print(f"{store}, {shape}: {len(waits)} runs, queued → started: "
              f"median {statistics.median(waits):.1f} ms, p90 {p90:.1f} ms, max {waits[-1]:.1f} ms")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=40)
            except subprocess.TimeoutExpired:
                p.kill()
        if args.postgres:
            psql(f"DROP DATABASE IF EXISTS {db_name} WITH (FORCE)")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
