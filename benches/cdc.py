"""Change data capture from PostgreSQL against native logical replication.

One throwaway PostgreSQL cluster (`wal_level = logical`, under `runuser`,
in a temp dir, on a free port) holds the source database and two
destination databases. The same table is mirrored twice: by a Sluice flow
in `cdc_deduped` (through the API, default settings, the release binary on
its embedded store), and by `CREATE SUBSCRIPTION` (PostgreSQL's own
logical replication: the physical limit of the same work on the same
cluster). Both are caught up, then stopped; a load of CHANGES changes (60%
updates, 20% inserts, 20% deletes, in transactions of 1,000) is written at
the source; then each catches up alone, timed:

- Sluice: one run (`POST …/run`, its server-side `finished_at`);
- native: `ALTER SUBSCRIPTION … ENABLE` until the load's last transaction
  (a marker row) is applied at the subscriber (polled every 50 ms by an
  index lookup; changes apply in commit order).

Both destinations are compared with the source row by row (an md5 of the
ordered rows). Also measured: the initial snapshot (the first run's copy)
against the binary COPY pipe of the same table, Sluice's peak RSS, and the
slot's retained WAL while another table takes writes for DURATION seconds
between runs of the flow every 10 s, and a continuous flow at RATE changes
a second (20 commits a second) for LATENCY_SECS: the time from a row's
insert (`clock_timestamp()` at the source) to the moment a poller of the
destination (every 20 ms, same cluster, same clock) first sees it.

    cargo build --release
    python3 benches/cdc.py      # CHANGES=1000000 ROWS=1000000 DURATION=120 RATE=2000 LATENCY_SECS=60

Needs the PostgreSQL server binaries (initdb, pg_ctl), psql and runuser.
"""

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluicebench import free_port, peak_rss, reset_peak_rss, serve, stop  # noqa: E402

CHANGES = int(os.environ.get("CHANGES", "1000000"))
ROWS = int(os.environ.get("ROWS", "1000000"))
DURATION = int(os.environ.get("DURATION", "120"))
RATE = int(os.environ.get("RATE", "2000"))
LATENCY_SECS = int(os.environ.get("LATENCY_SECS", "60"))
TXN = 1000


def pg_bin():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        sys.exit("no PostgreSQL server binaries under /usr/lib/postgresql")
    return os.path.dirname(found[-1])


class Cluster:
    """A PostgreSQL cluster of the bench's own."""

    def __init__(self, work):
        self.dir = os.path.join(work, "pg")
        os.makedirs(self.dir)
        shutil.chown(work, "postgres", "postgres")
        shutil.chown(self.dir, "postgres", "postgres")
        self.port = free_port()
        self.bin = pg_bin()
        data = os.path.join(self.dir, "data")
        self.as_pg([os.path.join(self.bin, "initdb"), "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"])
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c wal_level=logical "
                "-c max_replication_slots=10 -c max_wal_senders=10 -c max_worker_processes=16 "
                "-c shared_buffers=256MB -c max_wal_size=4GB")
        self.as_pg([os.path.join(self.bin, "pg_ctl"), "-D", data, "-o", opts, "-l",
                    os.path.join(self.dir, "log"), "-w", "start"])
        self.data = data

    def as_pg(self, args):
        subprocess.run(["runuser", "-u", "postgres", "--"] + args, check=True, capture_output=True)

    def url(self, db):
        return f"postgres://postgres@127.0.0.1:{self.port}/{db}"

    def sql(self, db, sql):
        out = subprocess.run(["psql", "-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1", self.url(db), "-c", sql],
                             check=True, capture_output=True, text=True)
        return out.stdout.strip()

    def stop(self):
        self.as_pg([os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-m", "immediate", "stop"])


TABLE = ("CREATE TABLE t (id bigint PRIMARY KEY, n bigint NOT NULL, note text, amount numeric(12,2), "
         "at timestamptz NOT NULL)")
FINGERPRINT = "SELECT count(*) || ':' || coalesce(md5(string_agg(t::text, ',' ORDER BY id)), '') FROM t"


def load(pg, changes):
    """`changes` changes in transactions of TXN: per transaction 600
    updates, 200 inserts (new ids past the table's end) and 200 deletes."""
    txns = changes // TXN
    script = []
    for _ in range(txns):
        script.append(
            "BEGIN;"
            "UPDATE t SET n = n + 1, note = md5(random()::text), at = now() "
            " WHERE id IN (SELECT id FROM t TABLESAMPLE SYSTEM_ROWS(600));"
            "INSERT INTO t SELECT m + g, g, md5(g::text), g / 100.0, now() "
            " FROM (SELECT coalesce(max(id), 0) AS m FROM t) x, generate_series(1, 200) g;"
            "DELETE FROM t WHERE id IN (SELECT id FROM t TABLESAMPLE SYSTEM_ROWS(200));"
            "COMMIT;")
    path = os.path.join(pg.dir, "load.sql")
    with open(path, "w") as f:
        f.write("\n".join(script))
    subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", pg.url("src"), "-f", path], check=True,
                   capture_output=True)


def main():
    if not os.path.exists(os.environ.get("BIN", "target/release/sluice")):
        sys.exit("build the release binary first: cargo build --release")
    work = tempfile.mkdtemp(prefix="sluice-cdc-bench-")
    pg = Cluster(work)
    sluice = None
    try:
        for db in ["src", "dst_sluice", "dst_native", "dst_copy"]:
            pg.sql("postgres", f"CREATE DATABASE {db}")
        pg.sql("src", "CREATE EXTENSION tsm_system_rows")
        pg.sql("src", TABLE)
        pg.sql("src", "CREATE TABLE busy (id bigserial PRIMARY KEY, note text)")
        pg.sql("src", f"INSERT INTO t SELECT g, g, md5(g::text), g / 100.0, now() FROM generate_series(1, {ROWS}) g")
        pg.sql("src", "VACUUM ANALYZE t")
        for db in ["dst_native", "dst_copy"]:
            pg.sql(db, TABLE)

        # The initial snapshot's physical limit: the binary COPY pipe.
        start = time.time()
        subprocess.run(f"psql -X -q {pg.url('src')} -c 'COPY t TO STDOUT (FORMAT binary)' | "
                       f"psql -X -q {pg.url('dst_copy')} -c 'COPY t FROM STDIN (FORMAT binary)'",
                       shell=True, check=True)
        copy_pipe = time.time() - start

        os.makedirs(os.path.join(work, "sluice"))
        sluice, api = serve(os.path.join(work, "sluice"))
        org = api.call("POST", "/v1/organizations", {"name": "Bench"})["id"]
        conns = f"/v1/organizations/{org}/connections"
        cfg = {"host": "127.0.0.1", "port": pg.port, "user": "postgres", "sslmode": "disable"}
        src = api.call("POST", conns, {"name": "src", "type": "postgres", "capability": "source",
                                       "config": dict(cfg, database="src")})["id"]
        dst = api.call("POST", conns, {"name": "dst", "type": "postgres", "capability": "destination",
                                       "config": dict(cfg, database="dst_sluice")})["id"]
        flow = api.call("POST", f"/v1/organizations/{org}/flows", {
            "name": "t", "source_connection_id": src, "destination_connection_id": dst,
            "config": {"mappings": [{"source_entity": "t", "sync_mode": "cdc_deduped"}]}})["id"]
        reset_peak_rss(sluice)
        snapshot_secs, _ = api.run(org, flow)
        snapshot_rss = peak_rss(sluice)

        # Native logical replication, caught up from the same start.
        pg.sql("src", "CREATE PUBLICATION native FOR TABLE t")
        subprocess.run(f"psql -X -q {pg.url('src')} -c 'COPY t TO STDOUT (FORMAT binary)' | "
                       f"psql -X -q {pg.url('dst_native')} -c 'COPY t FROM STDIN (FORMAT binary)'",
                       shell=True, check=True)
        # On one cluster the slot is made apart (CREATE SUBSCRIPTION making
        # it would wait for itself).
        pg.sql("src", "SELECT pg_create_logical_replication_slot('native', 'pgoutput')")
        pg.sql("dst_native", f"CREATE SUBSCRIPTION native CONNECTION 'host=127.0.0.1 port={pg.port} "
               "user=postgres dbname=src' PUBLICATION native WITH (copy_data = false, create_slot = false, "
               "slot_name = 'native')")
        # Wait until its slot is active, then stop it for the load.
        for _ in range(300):
            if pg.sql("src", "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'native' AND active") == "1":
                break
            time.sleep(0.1)
        pg.sql("dst_native", "ALTER SUBSCRIPTION native DISABLE")
        for _ in range(300):
            if pg.sql("src", "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'native' AND active") == "0":
                break
            time.sleep(0.1)

        # ingestr's CDC (postgres+cdc://), where it is installed: its own
        # snapshot now, its catch-up after the load.
        ingestr = shutil.which("ingestr")
        ingestr_cmd = None
        if ingestr:
            pg.sql("postgres", "CREATE DATABASE dst_ingestr")
            pg.sql("src", "CREATE PUBLICATION ingestr_pub FOR TABLE t")
            ingestr_cmd = [ingestr, "ingest", "--yes",
                           "--source-uri", f"postgres+cdc://postgres@127.0.0.1:{pg.port}/src?publication=ingestr_pub"
                                           "&slot=ingestr_slot",
                           "--source-table", "public.t",
                           "--dest-uri", pg.url("dst_ingestr").replace("postgres://", "postgresql://"),
                           "--dest-table", "public.t"]
            start = time.time()
            first = subprocess.run(ingestr_cmd, capture_output=True, text=True)
            ingestr_snapshot = time.time() - start
            if first.returncode != 0:
                print(f"ingestr's CDC snapshot failed: {first.stderr[-2000:] or first.stdout[-2000:]}")
                ingestr_cmd = None

        start = time.time()
        load(pg, CHANGES)
        # The load's last transaction: a marker row, whose arrival says a
        # subscriber applied everything before it (changes apply in commit
        # order), so that catching up is watched by one index lookup.
        pg.sql("src", "INSERT INTO t VALUES (-1, 0, 'marker', 0, now())")
        load_secs = time.time() - start
        want = pg.sql("src", FINGERPRINT)

        # Sluice catches up: one run.
        reset_peak_rss(sluice)
        sluice_secs, run = api.run(org, flow)
        catchup_rss = peak_rss(sluice)
        got = pg.sql("dst_sluice", FINGERPRINT)
        if got != want:
            sys.exit(f"Sluice's mirror differs from the source: {got} != {want}")

        # Native catches up.
        start = time.time()
        pg.sql("dst_native", "ALTER SUBSCRIPTION native ENABLE")
        while pg.sql("dst_native", "SELECT count(*) FROM t WHERE id = -1") != "1":
            time.sleep(0.05)
            if time.time() - start > 3600:
                sys.exit("native replication did not catch up in an hour")
        native_secs = time.time() - start
        got = pg.sql("dst_native", FINGERPRINT)
        if got != want:
            sys.exit(f"native replication's copy differs from the source: {got} != {want}")
        pg.sql("dst_native", "ALTER SUBSCRIPTION native DISABLE")
        pg.sql("dst_native", "ALTER SUBSCRIPTION native SET (slot_name = NONE)")
        pg.sql("dst_native", "DROP SUBSCRIPTION native")
        pg.sql("src", "SELECT pg_drop_replication_slot('native')")

        ingestr_line = "ingestr: not installed (pip install ingestr)"
        if ingestr_cmd:
            start = time.time()
            again = subprocess.run(ingestr_cmd, capture_output=True, text=True)
            ingestr_secs = time.time() - start
            if again.returncode != 0:
                ingestr_line = f"ingestr's CDC catch-up failed: {again.stderr[-2000:] or again.stdout[-2000:]}"
            else:
                live = pg.sql("dst_ingestr", "SELECT count(*) FROM public.t WHERE _cdc_deleted IS NOT TRUE")
                version = subprocess.run([ingestr, "--version"], capture_output=True, text=True).stdout.strip()
                rows = want.split(":")[0]
                ingestr_line = (f"catch-up, ingestr {version} (postgres+cdc): {ingestr_secs:8.2f} s  "
                                f"{CHANGES / ingestr_secs:10,.0f} changes/s; its snapshot {ingestr_snapshot:.2f} s; "
                                f"live rows {live} (source {rows})")
            pg.sql("src", "SELECT pg_drop_replication_slot('ingestr_slot') FROM pg_replication_slots "
                          "WHERE slot_name = 'ingestr_slot'")

        # Retained WAL while another table takes writes and the flow runs
        # every 10 s: flat, not growing with the writes.
        stop_writes = threading.Event()

        def writer():
            while not stop_writes.is_set():
                pg.sql("src", "INSERT INTO busy (note) SELECT repeat('x', 200) FROM generate_series(1, 2000)")

        t = threading.Thread(target=writer)
        t.start()
        retained = []
        end = time.time() + DURATION
        written_from = pg.sql("src", "SELECT pg_current_wal_lsn()")
        while time.time() < end:
            time.sleep(10)
            api.run(org, flow)
            retained.append(int(pg.sql("src", "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint "
                                              "FROM pg_replication_slots WHERE slot_name LIKE 'sluice_%'")))
        stop_writes.set()
        t.join()
        written = int(pg.sql("src", f"SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{written_from}')::bigint"))
        overall_rss = peak_rss(sluice)

        # Continuous mode at RATE changes/s: commit-to-visible latency.
        pg.sql("src", "CREATE TABLE lat (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp(), "
                      "pad text)")
        cflow = api.call("POST", f"/v1/organizations/{org}/flows", {
            "name": "lat", "source_connection_id": src, "destination_connection_id": dst,
            "config": {"continuous": True, "mappings": [{"source_entity": "lat", "sync_mode": "cdc_deduped"}]}})["id"]
        for _ in range(600):
            if pg.sql("dst_sluice", "SELECT count(*) FROM pg_tables WHERE tablename = 'lat'") == "1":
                break
            time.sleep(0.1)
        else:
            sys.exit("the continuous flow did not start")
        batch = max(1, RATE // 20)
        stop_writes.clear()

        def rate_writer():
            # One psql session reading statements from a pipe: 20 commits a
            # second of RATE/20 rows each.
            p = subprocess.Popen(["psql", "-X", "-q", pg.url("src")], stdin=subprocess.PIPE, text=True)
            next_at = time.time()
            while not stop_writes.is_set():
                p.stdin.write(f"INSERT INTO lat (pad) SELECT md5(g::text) FROM generate_series(1, {batch}) g;\n")
                p.stdin.flush()
                next_at += 0.05
                time.sleep(max(0.0, next_at - time.time()))
            p.stdin.close()
            p.wait()

        reset_peak_rss(sluice)
        w = threading.Thread(target=rate_writer)
        w.start()
        latencies, last = [], 0
        poller = subprocess.Popen(["psql", "-X", "-q", "-tA", "-F", " ", pg.url("dst_sluice")], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        end = time.time() + LATENCY_SECS
        while time.time() < end:
            poller.stdin.write(f"SELECT id, extract(epoch FROM clock_timestamp() - at) FROM lat WHERE id > {last} "
                               "ORDER BY id;\nSELECT 'END';\n")
            poller.stdin.flush()
            while True:
                line = poller.stdout.readline().strip()
                if line == "END":
                    break
                if line:
                    i, secs = line.split(" ")
                    last = max(last, int(i))
                    latencies.append(float(secs))
            time.sleep(0.02)
        stop_writes.set()
        w.join()
        poller.stdin.close()
        poller.wait()
        lat_rss = peak_rss(sluice)
        api.call("PATCH", f"/v1/organizations/{org}/flows/{cflow}", {"status": "paused"})
        latencies.sort()

        # A table added to the running flow: copied online, in chunks by its
        # key, while the stream goes on (here, idle), into a fresh table.
        api.call("PATCH", f"/v1/organizations/{org}/flows/{flow}", {"config": {"mappings": [
            {"source_entity": "t", "sync_mode": "cdc_deduped"},
            {"source_entity": "t", "dest_entity": "t_added", "sync_mode": "cdc_deduped"}]}})
        reset_peak_rss(sluice)
        added_secs, _ = api.run(org, flow)
        added_rss = peak_rss(sluice)
        want = pg.sql("src", FINGERPRINT)
        got = pg.sql("dst_sluice", FINGERPRINT.replace("t::text", "t_added::text").replace("FROM t", "FROM t_added"))
        if got != want:
            sys.exit(f"the table added online differs from the source: {got} != {want}")

        def pct(p):
            return latencies[min(len(latencies) - 1, int(len(latencies) * p))] * 1000

        mib = 1024 * 1024
        print(f"changes: {CHANGES:,} in {CHANGES // TXN:,} transactions (load written in {load_secs:.1f} s); "
              f"table of {ROWS:,} rows")
        print(f"catch-up, Sluice (one run):      {sluice_secs:8.2f} s  {CHANGES / sluice_secs:10,.0f} changes/s  "
              f"peak RSS {catchup_rss}")
        print(f"catch-up, native subscription:   {native_secs:8.2f} s  {CHANGES / native_secs:10,.0f} changes/s")
        print(f"  ratio Sluice/native throughput: {native_secs / sluice_secs:.2f}x")
        print(ingestr_line)
        print("Sling: its CDC needs a paid CLI Pro Max token (docs.slingdata.io/concepts/change-capture): not run")
        print(f"initial snapshot, Sluice (first run): {snapshot_secs:8.2f} s  peak RSS {snapshot_rss}")
        print(f"initial snapshot, binary COPY pipe:   {copy_pipe:8.2f} s")
        print(f"  ratio Sluice/pipe throughput: {copy_pipe / snapshot_secs:.2f}x")
        print(f"table added to the running flow, copied online in chunks: {added_secs:8.2f} s  "
              f"({copy_pipe / added_secs:.2f}x the pipe's throughput)  peak RSS {added_rss}")
        print(f"retained WAL over {DURATION} s of writes to another table ({written / mib:,.0f} MiB of WAL written), "
              f"after each run every 10 s: {', '.join(f'{r / mib:.1f}' for r in retained)} MiB")
        print(f"peak RSS since the catch-up (the retained-WAL phase included): {overall_rss}")
        print(f"continuous at {RATE:,} changes/s for {LATENCY_SECS} s: {len(latencies):,} rows seen; commit-to-visible "
              f"p50 {pct(0.5):.0f} ms, p95 {pct(0.95):.0f} ms, p99 {pct(0.99):.0f} ms, max {latencies[-1] * 1000:.0f} ms; "
              f"peak RSS {lat_rss}")
        print(f"run entity stats: {run['entities'][0]['rows_read']:,} read, {run['entities'][0]['rows_written']:,} written")
    finally:
        if sluice:
            stop(sluice)
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
