"""Change data capture from MariaDB's binlog against MariaDB's own replication.

Two throwaway MariaDB servers of the bench's own (`mariadb-install-db` and
`mariadbd` as `mysql`, in a temp dir, on free ports): the source, with a ROW
binlog, and a replica (`CHANGE MASTER TO … MASTER_USE_GTID = slave_pos`:
MariaDB's own replication, the limit of the same work on this machine), plus
a throwaway PostgreSQL cluster (benches/cdc.py's) as Sluice's destination.
The same table of ROWS rows is mirrored twice: by a Sluice flow in
`cdc_deduped` (through the API, default settings, the release binary on its
embedded store) into PostgreSQL, and by the replica. Both are caught up,
then stopped; a load of CHANGES changes (60% updates, 20% inserts, 20%
deletes, in transactions of 1,000) is written at the source; then each
catches up alone, timed:

- Sluice: one run (`POST …/run`, its server-side `finished_at`);
- the replica: `START SLAVE` until its `gtid_slave_pos` reaches the
  source's `gtid_binlog_pos` (polled every 50 ms).

Both copies are compared with the source (a count and a sum over each
column). Also measured: the first run's copy (a consistent snapshot) and
Sluice's peak RSS, and a continuous flow at RATE changes a second (20
commits a second) for LATENCY_SECS: the time from a row's insert (its
`at` column, `NOW(6)` at the source) to the moment a poller of the
destination (every 20 ms, same machine, same clock) first sees it.

    cargo build --release
    python3 benches/binlog.py   # CHANGES=1000000 ROWS=1000000 RATE=2000 LATENCY_SECS=60
    PROFILE=/tmp/perf.data python3 benches/binlog.py   # and `perf record` the server during the catch-up

Needs mariadb-install-db, mariadbd and the mariadb client, and what
benches/cdc.py needs for its PostgreSQL cluster.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdc import Cluster  # noqa: E402
from sluicebench import BIN, free_port, peak_rss, reset_peak_rss, serve, stop  # noqa: E402

CHANGES = int(os.environ.get("CHANGES", "1000000"))
ROWS = int(os.environ.get("ROWS", "1000000"))
RATE = int(os.environ.get("RATE", "2000"))
LATENCY_SECS = int(os.environ.get("LATENCY_SECS", "60"))
TXN = 1000


class MariaDb:
    """A MariaDB server of the bench's own."""

    def __init__(self, work, name, server_id, binlog):
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir)
        shutil.chown(self.dir, "mysql", "mysql")
        data = os.path.join(self.dir, "data")
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=mysql",
                        "--auth-root-authentication-method=normal", "--skip-test-db", f"--tmpdir={self.dir}"],
                       check=True, capture_output=True)
        self.port = free_port()
        args = ["mariadbd", "--no-defaults", "--user=mysql", "--bind-address=127.0.0.1", "--skip-name-resolve",
                f"--datadir={data}", f"--port={self.port}", f"--socket={os.path.join(self.dir, 'sock')}",
                f"--tmpdir={self.dir}", f"--server-id={server_id}", "--innodb-buffer-pool-size=512M", "--innodb-log-file-size=512M",
                "--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0"]
        if binlog:
            args += [f"--log-bin={os.path.join(self.dir, 'binlog')}", "--binlog-format=ROW"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            if subprocess.run(self.cmd("mysql") + ["-e", "SELECT 1"], capture_output=True).returncode == 0:
                return
            time.sleep(0.1)
        sys.exit(f"MariaDB {name} did not start")

    def cmd(self, db):
        return ["mariadb", "-h", "127.0.0.1", "-P", str(self.port), "-u", "root", "-N", "-B", db]

    def sql(self, db, sql):
        out = subprocess.run(self.cmd(db) + ["-e", sql], check=True, capture_output=True, text=True)
        return out.stdout.strip()

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


TABLE = ("CREATE TABLE t (id bigint PRIMARY KEY, n bigint NOT NULL, note varchar(64), amount decimal(12,2), "
         "at datetime(6) NOT NULL) ENGINE = InnoDB")
# A fingerprint both engines compute alike: rows, and sums over the columns.
MY_PRINT = "SELECT count(*), COALESCE(sum(id), 0), COALESCE(sum(n), 0), COALESCE(sum(amount), 0) FROM t"
PG_PRINT = "SELECT count(*) || E'\\t' || COALESCE(sum(id), 0) || E'\\t' || COALESCE(sum(n), 0) || E'\\t' || " \
           "COALESCE(sum(amount), 0) FROM t"


def load(src, changes):
    """`changes` changes in transactions of TXN: per transaction 600
    updates (a run of live ids that moves through the table), 200 inserts
    (new ids past the table's end) and 200 deletes (the lowest ids), each
    row there to change, so that every statement changes what it names."""
    script = []
    for i in range(changes // TXN):
        lo = i * 200 + 1
        new = ROWS + i * 200
        u = lo + 200 + (i * 600) % (ROWS - 1000)
        script.append(
            "BEGIN;"
            f"UPDATE t SET n = n + 1, note = md5(rand()), at = NOW(6) WHERE id BETWEEN {u} AND {u + 599};"
            f"INSERT INTO t SELECT {new} + seq, seq, md5(seq), seq / 100, NOW(6) FROM seq_1_to_200;"
            f"DELETE FROM t WHERE id BETWEEN {lo} AND {lo + 199};"
            "COMMIT;")
    path = os.path.join(src.dir, "load.sql")
    with open(path, "w") as f:
        f.write("\n".join(script))
    with open(path) as f:
        subprocess.run(src.cmd("src"), stdin=f, check=True, capture_output=True)


def main():
    if not os.path.exists(BIN):
        sys.exit("build the release binary first: cargo build --release")
    work = tempfile.mkdtemp(prefix="sluice-binlog-bench-")
    os.chmod(work, 0o755)
    src = MariaDb(work, "src", 1, True)
    replica = MariaDb(work, "replica", 2, False)
    pg = Cluster(work)
    sluice = None
    try:
        src.sql("mysql", "CREATE DATABASE src")
        src.sql("src", TABLE)
        src.sql("src", f"INSERT INTO t SELECT seq, seq, md5(seq), seq / 100, NOW(6) FROM seq_1_to_{ROWS}")
        pg.sql("postgres", "CREATE DATABASE dst")

        # The replica: MariaDB's own replication from the source's start.
        replica.sql("mysql", f"CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {src.port}, "
                             "MASTER_USER = 'root', MASTER_USE_GTID = slave_pos")
        replica.sql("mysql", "START SLAVE")

        def caught_up():
            want = src.sql("mysql", "SELECT @@gtid_binlog_pos")
            while replica.sql("mysql", "SELECT @@gtid_slave_pos") != want:
                time.sleep(0.05)

        caught_up()
        replica.sql("mysql", "STOP SLAVE")

        os.makedirs(os.path.join(work, "sluice"))
        sluice, api = serve(os.path.join(work, "sluice"))
        org = api.call("POST", "/v1/organizations", {"name": "Bench"})["id"]
        conns = f"/v1/organizations/{org}/connections"
        s = api.call("POST", conns, {"name": "src", "type": "mysql", "capability": "source", "config": {
            "host": "127.0.0.1", "port": src.port, "database": "src", "user": "root", "ssl_mode": "disabled"}})["id"]
        d = api.call("POST", conns, {"name": "dst", "type": "postgres", "capability": "destination", "config": {
            "host": "127.0.0.1", "port": pg.port, "database": "dst", "user": "postgres", "sslmode": "disable"}})["id"]
        flow = api.call("POST", f"/v1/organizations/{org}/flows", {
            "name": "t", "source_connection_id": s, "destination_connection_id": d,
            "config": {"mappings": [{"source_entity": "t", "sync_mode": "cdc_deduped"}]}})["id"]
        reset_peak_rss(sluice)
        snapshot_secs, _ = api.run(org, flow)
        snapshot_rss = peak_rss(sluice)

        start = time.time()
        load(src, CHANGES)
        load_secs = time.time() - start
        want = src.sql("src", MY_PRINT)

        reset_peak_rss(sluice)
        perf = None
        if os.environ.get("PROFILE"):  # a profile of the server during the catch-up
            perf = subprocess.Popen(["perf", "record", "-F", "499", "-g", "-p", str(sluice.pid), "-o",
                                     os.environ["PROFILE"]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
        sluice_secs, run = api.run(org, flow)
        if perf:
            perf.send_signal(2)
            perf.wait()
        catchup_rss = peak_rss(sluice)
        got = pg.sql("dst", PG_PRINT)
        if got.split("\t") != want.split("\t"):
            sys.exit(f"Sluice's mirror differs from the source: {got!r} != {want!r}")

        start = time.time()
        replica.sql("mysql", "START SLAVE")
        caught_up()
        replica_secs = time.time() - start
        got = replica.sql("src", MY_PRINT)
        if got != want:
            sys.exit(f"the replica differs from the source: {got!r} != {want!r}")

        # Continuous mode at RATE changes/s: commit-to-visible latency.
        src.sql("src", "CREATE TABLE lat (id bigint AUTO_INCREMENT PRIMARY KEY, at datetime(6) NOT NULL, "
                       "pad varchar(64)) ENGINE = InnoDB")
        cflow = api.call("POST", f"/v1/organizations/{org}/flows", {
            "name": "lat", "source_connection_id": s, "destination_connection_id": d,
            "config": {"continuous": True, "mappings": [{"source_entity": "lat", "sync_mode": "cdc_deduped"}]}})["id"]
        for _ in range(600):
            if pg.sql("dst", "SELECT count(*) FROM pg_tables WHERE tablename = 'lat'") == "1":
                break
            time.sleep(0.1)
        else:
            sys.exit("the continuous flow did not start")
        batch = max(1, RATE // 20)
        stop_writes = threading.Event()

        def rate_writer():
            p = subprocess.Popen(src.cmd("src"), stdin=subprocess.PIPE, text=True)
            next_at = time.time()
            while not stop_writes.is_set():
                p.stdin.write(f"INSERT INTO lat (at, pad) SELECT NOW(6), md5(seq) FROM seq_1_to_{batch};\n")
                p.stdin.flush()
                next_at += 0.05
                time.sleep(max(0.0, next_at - time.time()))
            p.stdin.close()
            p.wait()

        reset_peak_rss(sluice)
        w = threading.Thread(target=rate_writer)
        w.start()
        latencies, last = [], 0
        poller = subprocess.Popen(["psql", "-X", "-q", "-tA", "-F", " ", pg.url("dst")], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        # Both clocks are this machine's; the source writes its local time
        # (the session's time zone), the mirror holds it as UTC.
        offset = float(src.sql("src", "SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW())"))
        end = time.time() + LATENCY_SECS
        while time.time() < end:
            poller.stdin.write(f"SELECT id, extract(epoch FROM clock_timestamp() - at) + {offset} FROM lat "
                               f"WHERE id > {last} ORDER BY id;\nSELECT 'END';\n")
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

        def pct(p):
            return latencies[min(len(latencies) - 1, int(len(latencies) * p))] * 1000

        print(f"changes: {CHANGES:,} in {CHANGES // TXN:,} transactions (load written in {load_secs:.1f} s); "
              f"table of {ROWS:,} rows")
        print(f"catch-up, Sluice (one run) into PostgreSQL: {sluice_secs:8.2f} s  "
              f"{CHANGES / sluice_secs:10,.0f} changes/s  peak RSS {catchup_rss}")
        print(f"catch-up, MariaDB replica (GTID):           {replica_secs:8.2f} s  "
              f"{CHANGES / replica_secs:10,.0f} changes/s")
        print(f"  ratio Sluice/replica throughput: {replica_secs / sluice_secs:.2f}x")
        print(f"initial snapshot, Sluice (first run): {snapshot_secs:8.2f} s  peak RSS {snapshot_rss}")
        if latencies:
            print(f"continuous at {RATE:,} changes/s for {LATENCY_SECS} s: {len(latencies):,} rows seen; "
                  f"commit-to-visible p50 {pct(0.5):.0f} ms, p95 {pct(0.95):.0f} ms, p99 {pct(0.99):.0f} ms, "
                  f"max {latencies[-1] * 1000:.0f} ms; peak RSS {lat_rss}")
        print(f"run entity stats: {run['entities'][0]['rows_read']:,} read, "
              f"{run['entities'][0]['rows_written']:,} written")
    finally:
        if sluice:
            stop(sluice)
        src.stop()
        replica.stop()
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
