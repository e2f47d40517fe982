#!/usr/bin/env python3
"""Sluice as users run it, against the raw pipe: a throwaway PostgreSQL
cluster with deployment settings (shared_buffers 1GB, max_wal_size 8GB) on a
free port, the benchmark table (bigint key, bigint, text, jsonb,
numeric(12,2), two timestamptz) generated in it, `sluice serve` on its
embedded store, connections and flows made through the API, and each timing
taken as a user sees it: from the API call that triggers a run to the run's
record saying it finished.

Timed, each the median of --rounds after a CHECKPOINT, in one run:
  - the raw binary COPY pipe (`psql COPY … TO STDOUT (FORMAT binary) | psql
    COPY … FROM STDIN (FORMAT binary)`) into an empty table with its key;
  - Sluice full refresh (full_refresh_overwrite) through the API;
  - Sluice first incremental load (incremental_deduped, no cursor, no
    target table) through the API;
  - the raw incremental (the 1% changed rows copied out in binary into a
    stage, merged with one INSERT … ON CONFLICT) against Sluice's 1%
    incremental through the API (no lookback, as the raw one takes none).
After each Sluice run the destination is checked equal to the source
(count, distinct keys, sums of two columns).

    cargo build --release
    benches/service.py                 # 1,000,000 rows, 3 rounds
    benches/service.py --rows 200000 --rounds 1

Needs the PostgreSQL server binaries (/usr/lib/postgresql/*/bin), psql, and
the release binary. Run as root, the cluster is made and run as the
`postgres` OS user (initdb refuses root).
"""

import argparse
import glob
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("BIN", os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "sluice"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A PostgreSQL cluster of this run, removed at the end."""

    def __init__(self, work):
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
        if not bins:
            sys.exit("no PostgreSQL server binaries under /usr/lib/postgresql")
        self.bin = bins[-1]
        self.dir = os.path.join(work, "pg")
        self.port = free_port()
        self.as_postgres = os.geteuid() == 0
        os.makedirs(self.dir)
        if self.as_postgres:
            shutil.chown(work, "postgres")
            shutil.chown(self.dir, "postgres")
        self.cmd([f"{self.bin}/initdb", "-D", self.dir, "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        opts = (f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.dir} "
                "-c shared_buffers=1GB -c max_wal_size=8GB -c fsync=on -c synchronous_commit=on")
        self.cmd([f"{self.bin}/pg_ctl", "-D", self.dir, "-o", opts, "-l", os.path.join(self.dir, "log"), "-w", "start"])

    def cmd(self, args):
        if self.as_postgres:
            args = ["runuser", "-u", "postgres", "--", *args]
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)

    def stop(self):
        try:
            self.cmd([f"{self.bin}/pg_ctl", "-D", self.dir, "-m", "fast", "-w", "stop"])
        except subprocess.CalledProcessError:
            pass

    def psql(self, sql, db="bench"):
        out = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", db,
                              "-v", "ON_ERROR_STOP=1", "-qAtc", sql], check=True, capture_output=True, text=True)
        return out.stdout.strip()

    def shell(self, script):
        """Seconds `script` (a shell pipeline) takes."""
        start = time.perf_counter()
        subprocess.run(["bash", "-o", "pipefail", "-c", script], check=True)
        return time.perf_counter() - start

    def q(self, sql):
        return f'psql -q -h 127.0.0.1 -p {self.port} -U postgres -d bench -c "{sql}"'


class Api:
    def __init__(self, base, token):
        self.base, self.token = base, token

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=600) as res:
                text = res.read()
                return json.loads(text) if text else None
        except urllib.error.HTTPError as e:
            sys.exit(f"{method} {path}: {e.code} {e.read().decode()}")

    def run(self, org, flow):
        """Triggers the flow and waits for its run: (seconds, the run)."""
        start = time.perf_counter()
        run = self.call("POST", f"/v1/organizations/{org}/flows/{flow}/run", {})
        while True:
            r = self.call("GET", f"/v1/organizations/{org}/runs/{run['id']}")
            if r["finished_at"]:
                secs = time.perf_counter() - start
                if r["status"] != "succeeded":
                    sys.exit(f"a run did not succeed: {json.dumps(r)}")
                return secs, r
            time.sleep(0.01)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not os.access(BIN, os.X_OK):
        sys.exit(f"no release binary at {BIN}: cargo build --release")
    rows, rounds = args.rows, args.rounds
    changed = rows // 100
    work = tempfile.mkdtemp(prefix="sluice-service-bench-")
    os.chmod(work, 0o755)
    pg, sluice = None, None
    try:
        pg = Cluster(work)
        pg.psql("CREATE DATABASE bench", db="postgres")
        pg.psql(f"""
            CREATE SCHEMA src; CREATE SCHEMA dst;
            CREATE TABLE src.t (id bigint PRIMARY KEY, a bigint NOT NULL, s text, j jsonb, n numeric(12,2),
                ts1 timestamptz, updated timestamptz NOT NULL);
            INSERT INTO src.t SELECT g, g * 7, 'row ' || g || ' some text of moderate length',
                jsonb_build_object('k', g, 'tag', 'x' || (g % 100)), (g % 100000) / 100.0,
                timestamptz '2025-01-01' + g * interval '1 minute', timestamptz '2026-01-01' + g * interval '1 millisecond'
              FROM generate_series(1, {rows}) g;
            CREATE INDEX ON src.t (updated);""")
        pg.psql("VACUUM ANALYZE src.t")
        print(f"table: {rows:,} rows; 1% = {changed:,} rows; PostgreSQL {pg.bin.split('/')[-2]} on port {pg.port} "
              f"(shared_buffers 1GB, max_wal_size 8GB); {rounds} round(s) each\n", flush=True)

        def same(table):
            want = pg.psql("SELECT count(*), count(DISTINCT id), sum(a), sum(n) FROM src.t")
            got = pg.psql(f"SELECT count(*), count(DISTINCT id), sum(a), sum(n) FROM dst.{table}")
            if want != got:
                sys.exit(f"dst.{table} differs from the source: {got} against {want}")

        # The raw pipe, into an empty table with its key.
        pipe = []
        for i in range(rounds):
            pg.psql("DROP TABLE IF EXISTS dst.pipe; CREATE TABLE dst.pipe (LIKE src.t INCLUDING ALL)")
            pg.psql("CHECKPOINT")
            pipe.append(pg.shell(f"{pg.q('COPY src.t TO STDOUT (FORMAT binary)')} | {pg.q('COPY dst.pipe FROM STDIN (FORMAT binary)')}"))
        same("pipe")

        # The service, on its embedded store.
        port = free_port()
        env = dict(os.environ, SLUICE_LISTEN=f"127.0.0.1:{port}", SLUICE_DATA_DIR=os.path.join(work, "data"),
                   SLUICE_FILE_ROOT=os.path.join(work, "files"),
                   SLUICE_JWT_HS256_SECRET="service-bench-secret-service-bench-secret",
                   SLUICE_MASTER_KEY="BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=", RUST_LOG="warn")
        env.pop("SLUICE_DATABASE_URL", None)
        log = open(os.path.join(work, "serve.log"), "w")
        sluice = subprocess.Popen([BIN, "serve"], env=env, stdout=log, stderr=log)
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                urllib.request.urlopen(base + "/v1/health", timeout=1)
                break
            except Exception:
                time.sleep(0.05)
        token = subprocess.run([BIN, "token", "--email", "bench@example.com"], env=env, check=True,
                               capture_output=True, text=True).stdout.strip()
        api = Api(base, token)
        org = api.call("POST", "/v1/organizations", {"name": "Service bench"})["id"]
        conn = lambda name, schema: api.call("POST", f"/v1/organizations/{org}/connections", {
            "name": name, "type": "postgres", "capability": "both",
            "config": {"host": "127.0.0.1", "port": pg.port, "database": "bench", "user": "postgres",
                       "schema": schema, "sslmode": "disable"}})["id"]
        src, dst = conn("src", "src"), conn("dst", "dst")

        def flow(name, mapping):
            return api.call("POST", f"/v1/organizations/{org}/flows", {
                "name": name, "source_connection_id": src, "destination_connection_id": dst,
                "config": {"mappings": [mapping]}})["id"]

        full_flow = flow("full", {"source_entity": "t", "dest_entity": "full", "sync_mode": "full_refresh_overwrite"})
        full = []
        for _ in range(rounds):
            pg.psql("CHECKPOINT")
            secs, _ = api.run(org, full_flow)
            full.append(secs)
            same("full")
        inc = {"source_entity": "t", "sync_mode": "incremental_deduped", "cursor_field": "updated",
               "cursor_lookback": "0", "primary_key": "id"}
        first, inc_flow = [], None
        for i in range(rounds):
            f = flow(f"first-{i}", dict(inc, dest_entity=f"inc_{i}"))
            inc_flow = inc_flow or f
            pg.psql("CHECKPOINT")
            secs, _ = api.run(org, f)
            first.append(secs)
            same(f"inc_{i}")
        raw, ours = [], []
        for _ in range(rounds):
            frm = pg.psql("SELECT max(updated) FROM src.t")
            pg.psql(f"UPDATE src.t SET a = a + 1, updated = timestamptz '{frm}' + interval '1 second' "
                    f"+ id * interval '1 microsecond' WHERE id % 100 = 0")
            pg.psql("CHECKPOINT")
            stage = os.path.join(work, "stage.bin")
            raw.append(pg.shell(
                f"{pg.q(f'COPY (SELECT * FROM src.t WHERE updated > timestamptz {chr(39)}{frm}{chr(39)}) TO STDOUT (FORMAT binary)')} > {stage} && "
                f"psql -q -h 127.0.0.1 -p {pg.port} -U postgres -d bench -v ON_ERROR_STOP=1 "
                f"-c 'CREATE TEMP TABLE stage (LIKE src.t)' -c \"\\\\copy stage FROM '{stage}' (FORMAT binary)\" "
                f"-c 'INSERT INTO dst.pipe SELECT * FROM stage ON CONFLICT (id) DO UPDATE SET a = EXCLUDED.a, updated = EXCLUDED.updated'"))
            pg.psql("CHECKPOINT")
            secs, r = api.run(org, inc_flow)
            written = r["entities"][0]["rows_written"]
            if written != changed:
                sys.exit(f"the incremental wrote {written} rows, {changed} changed")
            ours.append(secs)
            same("inc_0")
            same("pipe")

        med = statistics.median
        pipe_rate = rows / med(pipe)
        print(f"{'step':<58} {'median s':>9} {'rows/s':>11} {'ratio':>9}")
        print(f"{'raw binary COPY pipe (psql | psql), table with key':<58} {med(pipe):>9.2f} {pipe_rate:>11,.0f} {'1.00×':>9}")
        for what, t in [("Sluice full refresh, through the API", full),
                        ("Sluice first incremental load (no cursor, no target)", first)]:
            print(f"{what:<58} {med(t):>9.2f} {rows / med(t):>11,.0f} {rows / med(t) / pipe_rate:>8.2f}×")
        print(f"{'raw incremental, 1% spread (COPY out, stage, ON CONFLICT)':<58} {med(raw):>9.3f} {changed / med(raw):>11,.0f} {'1.00×':>9}")
        print(f"{'Sluice 1% incremental, through the API (× raw time)':<58} {med(ours):>9.3f} {changed / med(ours):>11,.0f} {med(ours) / med(raw):>8.2f}×")
        print("\nevery Sluice destination equals the source (count, distinct keys, sum(a), sum(n))")
        rss = open(f"/proc/{sluice.pid}/status").read().split("VmHWM:")[1].split("\n")[0].strip()
        print(f"peak RSS of sluice serve: {rss}")
    finally:
        if sluice:
            sluice.terminate()
            try:
                sluice.wait(timeout=40)
            except subprocess.TimeoutExpired:
                sluice.kill()
        if pg:
            pg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
