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
    incremental through the API, with the defaults a user gets (no
    lookback where the source holds the cursor at its oldest writer).
After each Sluice run the destination is checked equal to the source
(count, distinct keys, sums of two columns).

    cargo build --release
    benches/service.py                 # 1,000,000 rows, 3 rounds
    benches/service.py --rows 200000 --rounds 1

Sling (PyPI `sling-linux-amd64`, or $SLING) and ingestr (PyPI
`ingestr==1.1.22`) run on the same table, pair and checks when installed
(--no-peers skips them): full refresh, first incremental load (merge on
`id` by `updated`), and the 1% incremental (ingestr is handed the previous
greatest `updated` as --interval-start; Sling finds it in its target).

Needs the PostgreSQL server binaries (/usr/lib/postgresql/*/bin), psql, and
the release binary. Run as root, the cluster is made and run as the
`postgres` OS user (initdb refuses root).
"""

import argparse
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from sluicebench import BIN, free_port, peak_rss, serve, stop


def sling_binary():
    """Sling's binary: $SLING, `sling` on the PATH, or the one PyPI's
    `sling-linux-amd64` ships."""
    if os.environ.get("SLING"):
        return os.environ["SLING"]
    found = shutil.which("sling")
    if found:
        return found
    try:
        import sling_linux_amd64  # noqa: PLC0415 (optional)

        path = os.path.join(os.path.dirname(sling_linux_amd64.__file__), "bin", "sling-linux-amd64")
        os.chmod(path, 0o755)
        return path
    except ImportError:
        return None


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

    def bench_table(self, rows):
        """Database `bench`, schemas `src` and `dst`, and the benchmark
        table `src.t` of `rows` rows (times made in UTC)."""
        self.psql("CREATE DATABASE bench", db="postgres")
        self.psql(f"""
            SET TimeZone = 'UTC';
            CREATE SCHEMA src; CREATE SCHEMA dst;
            CREATE TABLE src.t (id bigint PRIMARY KEY, a bigint NOT NULL, s text, j jsonb, n numeric(12,2),
                ts1 timestamptz, updated timestamptz NOT NULL);
            INSERT INTO src.t SELECT g, g * 7, 'row ' || g || ' some text of moderate length',
                jsonb_build_object('k', g, 'tag', 'x' || (g % 100)), (g % 100000) / 100.0,
                timestamptz '2025-01-01' + g * interval '1 minute', timestamptz '2026-01-01' + g * interval '1 millisecond'
              FROM generate_series(1, {rows}) g;""")

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-peers", action="store_true", help="skip Sling and ingestr even when installed")
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
        pg.bench_table(rows)
        pg.psql("CREATE INDEX ON src.t (updated)")
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
        sluice, api = serve(work)
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

        # The peers, when installed: the same table, pair and checks.
        uri = f"postgresql://postgres@127.0.0.1:{pg.port}/bench?sslmode=disable"
        sling = None if args.no_peers else sling_binary()
        ingestr = None if args.no_peers else shutil.which("ingestr")
        peer_env = dict(os.environ, PG_SRC=uri, PG_DST=uri, SLING_DISABLE_TELEMETRY="true")

        def peer(argv):
            start = time.perf_counter()
            out = subprocess.run(argv, env=peer_env, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"{argv[0]} failed: {out.stdout[-2000:]} {out.stderr[-2000:]}")
            return time.perf_counter() - start

        def sling_run(table, incremental):
            argv = [sling, "run", "--src-conn", "PG_SRC", "--src-stream", "src.t", "--tgt-conn", "PG_DST",
                    "--tgt-object", f"dst.{table}"]
            argv += ["--mode", "incremental", "--primary-key", "id", "--update-key", "updated"] if incremental else ["--mode", "full-refresh"]
            return peer(argv)

        def ingestr_run(table, incremental, start=None):
            argv = [ingestr, "ingest", "--source-uri", uri, "--source-table", "src.t", "--dest-uri", uri,
                    "--dest-table", f"dst.{table}", "--yes"]
            if incremental:
                argv += ["--incremental-strategy", "merge", "--incremental-key", "updated", "--primary-key", "id"]
            if start:
                argv += ["--interval-start", start]
            return peer(argv)

        peers = [(n, f) for n, f in [("Sling", sling_run if sling else None), ("ingestr", ingestr_run if ingestr else None)] if f]
        peer_full = {n: [] for n, _ in peers}
        peer_first = {n: [] for n, _ in peers}
        peer_inc = {n: [] for n, _ in peers}

        full_flow = flow("full", {"source_entity": "t", "dest_entity": "full", "sync_mode": "full_refresh_overwrite"})
        full = []
        for _ in range(rounds):
            pg.psql("CHECKPOINT")
            secs, _ = api.run(org, full_flow)
            full.append(secs)
            same("full")
        # Every default, as a user's flow has them (no cursor_lookback: on
        # PostgreSQL with a role that sees every session it is "0").
        inc = {"source_entity": "t", "sync_mode": "incremental_deduped", "cursor_field": "updated",
               "primary_key": "id"}
        first, inc_flow = [], None
        for i in range(rounds):
            f = flow(f"first-{i}", dict(inc, dest_entity=f"inc_{i}"))
            inc_flow = inc_flow or f
            pg.psql("CHECKPOINT")
            secs, _ = api.run(org, f)
            first.append(secs)
            same(f"inc_{i}")
        # The peers after Sluice (each load leaves autovacuum work behind
        # on this 2-core machine, which the next measurement shares).
        for n, run in peers:
            for i in range(rounds):
                pg.psql("CHECKPOINT")
                peer_full[n].append(run(f"{n.lower()}_full", False))
                same(f"{n.lower()}_full")
                pg.psql(f"DROP TABLE IF EXISTS dst.{n.lower()}_inc_{i}")
                pg.psql("CHECKPOINT")
                peer_first[n].append(run(f"{n.lower()}_inc_{i}", True))
                same(f"{n.lower()}_inc_{i}")
        raw, ours = [], []
        for _ in range(rounds):
            frm = pg.psql("SELECT max(updated) FROM src.t")
            frm_iso = pg.psql("SELECT to_char(max(updated) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') FROM src.t")
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
            for n, run in peers:
                pg.psql("CHECKPOINT")
                # ingestr is handed the cursor (its state would re-read all);
                # Sling finds it in its target.
                extra = {"start": frm_iso} if n == "ingestr" else {}
                peer_inc[n].append(run(f"{n.lower()}_inc_0", True, **extra))
                same(f"{n.lower()}_inc_0")

        med = statistics.median
        pipe_rate = rows / med(pipe)
        print(f"{'step':<58} {'median s':>9} {'rows/s':>11} {'ratio':>9}")
        print(f"{'raw binary COPY pipe (psql | psql), table with key':<58} {med(pipe):>9.2f} {pipe_rate:>11,.0f} {'1.00×':>9}")
        for what, t in [("Sluice full refresh, through the API", full),
                        ("Sluice first incremental load (no cursor, no target)", first)]:
            print(f"{what:<58} {med(t):>9.2f} {rows / med(t):>11,.0f} {rows / med(t) / pipe_rate:>8.2f}×")
        print(f"{'raw incremental, 1% spread (COPY out, stage, ON CONFLICT)':<58} {med(raw):>9.3f} {changed / med(raw):>11,.0f} {'1.00×':>9}")
        print(f"{'Sluice 1% incremental, through the API (× raw time)':<58} {med(ours):>9.3f} {changed / med(ours):>11,.0f} {med(ours) / med(raw):>8.2f}×")
        for n, _ in peers:
            print(f"{n + ' full refresh':<58} {med(peer_full[n]):>9.2f} {rows / med(peer_full[n]):>11,.0f} {rows / med(peer_full[n]) / pipe_rate:>8.2f}×")
            print(f"{n + ' first incremental load':<58} {med(peer_first[n]):>9.2f} {rows / med(peer_first[n]):>11,.0f} {rows / med(peer_first[n]) / pipe_rate:>8.2f}×")
            print(f"{n + ' 1% incremental (× raw time)':<58} {med(peer_inc[n]):>9.3f} {changed / med(peer_inc[n]):>11,.0f} {med(peer_inc[n]) / med(raw):>8.2f}×")
        if args.no_peers:
            print("(Sling and ingestr skipped: --no-peers)")
        elif not peers:
            print("(Sling and ingestr are not installed: pip install sling-linux-amd64 'ingestr==1.1.22')")
        print("\nevery destination equals the source (count, distinct keys, sum(a), sum(n))")
        print(f"peak RSS of sluice serve: {peak_rss(sluice)}")
    finally:
        if sluice:
            stop(sluice)
        if pg:
            pg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
