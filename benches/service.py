#!/usr/bin/env python3
"""Sluice as users run it, against the raw pipe: a throwaway PostgreSQL
cluster with deployment settings (shared_buffers 1GB, max_wal_size 8GB) on a
free port, two benchmark tables generated in it (`current`: bigint key,
bigint, text, a small jsonb, numeric(12,2), two timestamptz; `events`:
issue 32's event table, a jsonb payload of about 160 bytes, updated by
`clock_timestamp()`), `sluice serve` on its
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
(count, distinct keys, sums of two columns). Each step begins after a
CHECKPOINT on a quiet machine: at least 90% idle over a second (the
autovacuum a large load leaves behind done), or flagged NOISY after 180 s.

    cargo build --release
    benches/service.py                 # both tables, 1,000,000 rows, 3 rounds
    benches/service.py --shape events --two-databases   # issue 32's setup
    benches/service.py --rows 200000 --rounds 1
    benches/service.py --shape events --perf /tmp/perf   # and where the time goes

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
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from sluicebench import BIN, free_port, peak_rss, serve, stop, wait_quiet


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

    def bench_table(self, shape, rows, two_databases):
        """The shape's source table `t` of `rows` rows (times made in UTC)
        in its database, and the database and schema it is written into:
        schema `dst` of the same database, or (two_databases) database
        `<shape>_dst`."""
        db = f"{shape['name']}_src"
        self.psql(f"CREATE DATABASE {db}", db="postgres")
        self.psql(f"SET TimeZone = 'UTC'; {shape['create']}; "
                  f"INSERT INTO t {shape['rows'].format(rows=rows)}", db=db)
        self.psql(f"CREATE INDEX ON t ({shape['cursor']})", db=db)
        self.psql("VACUUM ANALYZE t", db=db)
        if two_databases:
            dst = f"{shape['name']}_dst"
            self.psql(f"CREATE DATABASE {dst}", db="postgres")
            self.psql("CREATE SCHEMA dst", db=dst)
        else:
            dst = db
            self.psql("CREATE SCHEMA dst", db=db)
        return db, dst

    def schemas_table(self, rows):
        """Database `bench`, schemas `src` and `dst`, and the `current`
        table as `src.t` of `rows` rows (times made in UTC): the setup
        `pairs.py` and `verify.py` read with `psql(sql)` and `q(sql)`."""
        create = SHAPES["current"]["create"].replace("CREATE TABLE t", "CREATE TABLE src.t")
        self.psql("CREATE DATABASE bench", db="postgres")
        self.psql(f"SET TimeZone = 'UTC'; CREATE SCHEMA src; CREATE SCHEMA dst; {create}; "
                  f"INSERT INTO src.t {SHAPES['current']['rows'].format(rows=rows)}")

    def psql(self, sql, db="bench"):
        out = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", db,
                              "-v", "ON_ERROR_STOP=1", "-qAtc", sql], check=True, capture_output=True, text=True)
        return out.stdout.strip()

    def shell(self, script):
        """Seconds `script` (a shell pipeline) takes."""
        start = time.perf_counter()
        subprocess.run(["bash", "-o", "pipefail", "-c", script], check=True)
        return time.perf_counter() - start

    def q(self, sql, db="bench"):
        return f'psql -q -h 127.0.0.1 -p {self.port} -U postgres -d {db} -c "{sql}"'


# The two table shapes. `current`: the table this benchmark always had.
# `events`: issue 32's, an event table with a jsonb payload of about 160
# bytes (an md5 session id, a path, a user agent, a number, a two-element
# array), whose 1% incremental sets `updated_at = clock_timestamp()` as an
# application would. `sums`: the columns the equality check adds up.
SHAPES = {
    "current": {
        "name": "current",
        "create": """CREATE TABLE t (id bigint PRIMARY KEY, a bigint NOT NULL, s text, j jsonb, n numeric(12,2),
                     ts1 timestamptz, updated timestamptz NOT NULL)""",
        "rows": """SELECT g, g * 7, 'row ' || g || ' some text of moderate length',
                   jsonb_build_object('k', g, 'tag', 'x' || (g % 100)), (g % 100000) / 100.0,
                   timestamptz '2025-01-01' + g * interval '1 minute',
                   timestamptz '2026-01-01' + g * interval '1 millisecond'
                   FROM generate_series(1, {rows}) g""",
        "cursor": "updated",
        "sums": ("a", "n"),
        # After the greatest cursor, in an order of its own.
        "update": "UPDATE t SET a = a + 1, updated = timestamptz '{frm}' + interval '1 second' "
                  "+ id * interval '1 microsecond' WHERE id % 100 = 0",
        "merge": "a = EXCLUDED.a, updated = EXCLUDED.updated",
    },
    "events": {
        "name": "events",
        "create": """CREATE TABLE t (id bigint PRIMARY KEY, user_id bigint NOT NULL, kind text, payload jsonb,
                     amount numeric(12,2), created_at timestamptz, updated_at timestamptz NOT NULL)""",
        "rows": """SELECT g, g % 50000, (ARRAY['view', 'click', 'cart', 'buy'])[1 + g % 4],
                   jsonb_build_object('session', md5(g::text), 'path', '/products/' || (g % 5000) || '/reviews',
                     'agent', 'Mozilla/5.0 (X11; Linux x86_64) Firefox/121.0', 'n', g % 1000,
                     'pair', jsonb_build_array(g % 7, 'b' || (g % 11))),
                   (g % 100000) / 100.0, timestamptz '2025-01-01' + g * interval '1 second',
                   timestamptz '2025-06-01' + g * interval '1 millisecond'
                   FROM generate_series(1, {rows}) g""",
        "cursor": "updated_at",
        "sums": ("user_id", "amount"),
        "update": "UPDATE t SET amount = amount + 1, updated_at = clock_timestamp() WHERE id % 100 = 0",
        "merge": "amount = EXCLUDED.amount, updated_at = EXCLUDED.updated_at",
    },
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shape", choices=["current", "events", "both"], default="both")
    ap.add_argument("--two-databases", action="store_true",
                    help="write into another database of the cluster (issue 32's setup), not another schema")
    ap.add_argument("--no-peers", action="store_true", help="skip Sling and ingestr even when installed")
    ap.add_argument("--perf", metavar="DIR",
                    help="after the timed rounds, profile one more pipe, full refresh and first load system-wide "
                         "with `perf record -a -g` into DIR, and print where the CPU time went")
    args = ap.parse_args()
    if not os.access(BIN, os.X_OK):
        sys.exit(f"no release binary at {BIN}: cargo build --release")
    work = tempfile.mkdtemp(prefix="sluice-service-bench-")
    os.chmod(work, 0o755)
    pg, sluice = None, None
    try:
        pg = Cluster(work)
        sluice, api = serve(work)
        shapes = ["current", "events"] if args.shape == "both" else [args.shape]
        for name in shapes:
            bench(pg, api, SHAPES[name], args)
        print(f"peak RSS of sluice serve: {peak_rss(sluice)}")
    finally:
        if sluice:
            stop(sluice)
        if pg:
            pg.stop()
        shutil.rmtree(work, ignore_errors=True)


def perf_record(out, fn):
    """Runs `fn` under a system-wide `perf record` into `out`: its seconds."""
    rec = subprocess.Popen(["perf", "record", "-a", "-g", "-F", "499", "-o", out, "--", "sleep", "3600"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # perf is recording
    try:
        return fn()
    finally:
        rec.send_signal(signal.SIGINT)
        rec.wait()


def perf_summary(out, what):
    """Where the CPU time of a recording went: by thread name (postgres
    backends, psql, Sluice's tokio workers, `swapper` for idle), then the
    hottest functions of PostgreSQL and of Sluice's workers."""
    def report(limit, *extra):
        r = subprocess.run(["perf", "report", "-i", out, "--stdio", "--no-children", "-g", "none",
                            "--percent-limit", limit, *extra], capture_output=True, text=True)
        return [l.rstrip() for l in r.stdout.splitlines() if l.strip() and not l.startswith("#")]
    print(f"\nperf, {what}: share of all CPU samples (2 cores) by thread name", flush=True)
    for line in report("0.3", "--sort", "comm")[:10]:
        print("   " + line.strip())
    for comm, title in [("postgres", "PostgreSQL's backends"), ("tokio-rt-worker", "Sluice's workers")]:
        print(f"perf, {what}: {title}' hottest functions (% of all samples)")
        for line in report("0.4", "--comm", comm, "--sort", "dso,symbol")[:12]:
            print("   " + " ".join(line.split()[:4])[:110])


def profile(pg, api, org, shape, args, src_db, dst_db, ddl, full_flow, flow, inc, checkpoint):
    """One more pipe, full refresh and first load, each under `perf record`
    (untimed: the recording costs CPU of its own)."""
    os.makedirs(args.perf, exist_ok=True)
    name = shape["name"]
    pg.psql(f"DROP TABLE IF EXISTS dst.pipe; {ddl}", db=dst_db)
    checkpoint()
    pipe_cmd = (f"{pg.q('COPY t TO STDOUT (FORMAT binary)', src_db)} | "
                f"{pg.q('COPY dst.pipe FROM STDIN (FORMAT binary)', dst_db)}")
    for what, fn in [
        ("pipe", lambda: pg.shell(pipe_cmd)),
        ("full", lambda: api.run(org, full_flow)[0]),
        ("first", lambda: api.run(org, flow("first-perf", dict(inc, dest_entity="inc_perf")))[0]),
    ]:
        checkpoint(f"perf {what}")
        out = os.path.join(args.perf, f"{name}-{what}.data")
        secs = perf_record(out, fn)
        perf_summary(out, f"{name} {what} ({secs:.2f} s under perf)")


def bench(pg, api, shape, args):
    rows, rounds = args.rows, args.rounds
    changed = rows // 100
    src_db, dst_db = pg.bench_table(shape, rows, args.two_databases)
    cursor = shape["cursor"]
    where = f"database {dst_db}" if args.two_databases else "schema dst of the same database"
    print(f"\n{shape['name']} table: {rows:,} rows; 1% = {changed:,} rows; written into {where}; PostgreSQL "
          f"{pg.bin.split('/')[-2]} on port {pg.port} (shared_buffers 1GB, max_wal_size 8GB); {rounds} round(s) each",
          flush=True)
    width = pg.psql("SELECT round(avg(pg_column_size(t.*))) FROM t", db=src_db)
    print(f"average row: {width} bytes", flush=True)

    a, n = shape["sums"]

    def same(table):
        want = pg.psql(f"SELECT count(*), count(DISTINCT id), sum({a}), sum({n}) FROM t", db=src_db)
        got = pg.psql(f"SELECT count(*), count(DISTINCT id), sum({a}), sum({n}) FROM dst.{table}", db=dst_db)
        if want != got:
            sys.exit(f"dst.{table} differs from the source: {got} against {want}")

    noisy = []

    def checkpoint(step="a step"):
        # Each step on a quiet machine: the CHECKPOINT, then what a load
        # left behind (autovacuum of a fresh table) done, or flagged.
        pg.psql("CHECKPOINT", db="postgres")
        if not wait_quiet():
            noisy.append(step)

    # The raw pipe, into an empty table with its key.
    pipe = []
    ddl = shape["create"].replace("CREATE TABLE t", "CREATE TABLE dst.pipe")
    for i in range(rounds):
        pg.psql(f"DROP TABLE IF EXISTS dst.pipe; {ddl}", db=dst_db)
        checkpoint("pipe")
        pipe.append(pg.shell(f"{pg.q('COPY t TO STDOUT (FORMAT binary)', src_db)} | "
                             f"{pg.q('COPY dst.pipe FROM STDIN (FORMAT binary)', dst_db)}"))
    same("pipe")

    org = api.call("POST", "/v1/organizations", {"name": f"Service bench {shape['name']}"})["id"]
    conn = lambda name, db, schema: api.call("POST", f"/v1/organizations/{org}/connections", {
        "name": name, "type": "postgres", "capability": "both",
        "config": {"host": "127.0.0.1", "port": pg.port, "database": db, "user": "postgres",
                   "schema": schema, "sslmode": "disable"}})["id"]
    src, dst = conn("src", src_db, "public"), conn("dst", dst_db, "dst")

    def flow(name, mapping):
        return api.call("POST", f"/v1/organizations/{org}/flows", {
            "name": name, "source_connection_id": src, "destination_connection_id": dst,
            "config": {"mappings": [mapping]}})["id"]

    # The peers, when installed: the same table, pair and checks.
    src_uri = f"postgresql://postgres@127.0.0.1:{pg.port}/{src_db}?sslmode=disable"
    dst_uri = f"postgresql://postgres@127.0.0.1:{pg.port}/{dst_db}?sslmode=disable"
    sling = None if args.no_peers else sling_binary()
    ingestr = None if args.no_peers else shutil.which("ingestr")
    peer_env = dict(os.environ, PG_SRC=src_uri, PG_DST=dst_uri, SLING_DISABLE_TELEMETRY="true")

    def peer(argv):
        start = time.perf_counter()
        out = subprocess.run(argv, env=peer_env, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"{argv[0]} failed: {out.stdout[-2000:]} {out.stderr[-2000:]}")
        return time.perf_counter() - start

    def sling_run(table, incremental):
        argv = [sling, "run", "--src-conn", "PG_SRC", "--src-stream", "public.t", "--tgt-conn", "PG_DST",
                "--tgt-object", f"dst.{table}"]
        argv += ["--mode", "incremental", "--primary-key", "id", "--update-key", cursor] if incremental else ["--mode", "full-refresh"]
        return peer(argv)

    def ingestr_run(table, incremental, start=None):
        argv = [ingestr, "ingest", "--source-uri", src_uri, "--source-table", "public.t", "--dest-uri", dst_uri,
                "--dest-table", f"dst.{table}", "--yes"]
        if incremental:
            argv += ["--incremental-strategy", "merge", "--incremental-key", cursor, "--primary-key", "id"]
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
        checkpoint("full refresh")
        secs, _ = api.run(org, full_flow)
        full.append(secs)
        same("full")
    # Every default, as a user's flow has them (no cursor_lookback: on
    # PostgreSQL with a role that sees every session it is "0").
    inc = {"source_entity": "t", "sync_mode": "incremental_deduped", "cursor_field": cursor, "primary_key": "id"}
    first, inc_flow = [], None
    for i in range(rounds):
        f = flow(f"first-{i}", dict(inc, dest_entity=f"inc_{i}"))
        inc_flow = inc_flow or f
        checkpoint("first load")
        secs, _ = api.run(org, f)
        first.append(secs)
        same(f"inc_{i}")
    # The peers after Sluice (each load leaves autovacuum work behind
    # on this 2-core machine, which the next measurement shares).
    for n, run in peers:
        for i in range(rounds):
            checkpoint(f"{n} full refresh")
            peer_full[n].append(run(f"{n.lower()}_full", False))
            same(f"{n.lower()}_full")
            pg.psql(f"DROP TABLE IF EXISTS dst.{n.lower()}_inc_{i}", db=dst_db)
            checkpoint(f"{n} first load")
            peer_first[n].append(run(f"{n.lower()}_inc_{i}", True))
            same(f"{n.lower()}_inc_{i}")
    raw, ours, reread = [], [], []
    for _ in range(rounds):
        frm = pg.psql(f"SELECT max({cursor}) FROM t", db=src_db)
        frm_iso = pg.psql(f"SELECT to_char(max({cursor}) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') FROM t",
                          db=src_db)
        pg.psql(shape["update"].format(frm=frm), db=src_db)
        checkpoint("raw incremental")
        stage = os.path.join(pg.dir, "..", "stage.bin")
        since = f"{cursor} > timestamptz {chr(39)}{frm}{chr(39)}"
        raw.append(pg.shell(
            f"{pg.q(f'COPY (SELECT * FROM t WHERE {since}) TO STDOUT (FORMAT binary)', src_db)} > {stage} && "
            f"psql -q -h 127.0.0.1 -p {pg.port} -U postgres -d {dst_db} -v ON_ERROR_STOP=1 "
            f"-c 'CREATE TEMP TABLE stage (LIKE dst.pipe)' -c \"\\\\copy stage FROM '{stage}' (FORMAT binary)\" "
            f"-c 'INSERT INTO dst.pipe SELECT * FROM stage ON CONFLICT (id) DO UPDATE SET {shape['merge']}'"))
        checkpoint("1% incremental")
        secs, r = api.run(org, inc_flow)
        e = r["entities"][0]
        if e["rows_written"] < changed:
            sys.exit(f"the incremental wrote {e['rows_written']} rows, {changed} changed")
        # Rows read beyond those changed: what a lookback re-reads.
        reread.append(e["rows_read"] - changed)
        ours.append(secs)
        same("inc_0")
        same("pipe")
        for n, run in peers:
            checkpoint(f"{n} 1% incremental")
            # ingestr is handed the cursor (its state would re-read all);
            # Sling finds it in its target.
            extra = {"start": frm_iso} if n == "ingestr" else {}
            peer_inc[n].append(run(f"{n.lower()}_inc_0", True, **extra))
            same(f"{n.lower()}_inc_0")
    if args.perf:
        profile(pg, api, org, shape, args, src_db, dst_db, ddl, full_flow, flow, inc, checkpoint)
    log = api.call("GET", f"/v1/organizations/{org}/logs/{r['id']}")
    protection = [l["message"] for l in log["data"] if "lookback" in l["message"] or "protection" in l["message"]]

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
    print(f"rows the 1% incremental read beyond those changed, per round: {reread}")
    if noisy:
        print(f"NOISY: the machine was still busy (under 90% idle after 180 s) before: {', '.join(noisy)}")
    else:
        print("every step began on a quiet machine (at least 90% idle over a second, after its CHECKPOINT)")
    print(f"1% incremental per round: raw {', '.join(f'{t:.3f}' for t in raw)} s; "
          f"Sluice {', '.join(f'{t:.3f}' for t in ours)} s")
    for m in protection:
        print(f"run log: {m}")
    print("every destination equals the source (count, distinct keys, and two sums)", flush=True)


if __name__ == "__main__":
    main()
