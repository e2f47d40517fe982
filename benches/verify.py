#!/usr/bin/env python3
"""Verification against reading both tables once.

The benchmark table of `service.py` (bigint key, bigint, text, json,
numeric(12,2), two timestamps) of ROWS rows, in a throwaway PostgreSQL
cluster (schema `src`, and an identical copy in schema `dst`) and in the
machine's MariaDB (a database of this run, loaded from the same rows).
`sluice serve` on its embedded store, default settings, the release binary;
two flows through the API (PostgreSQL → PostgreSQL and MariaDB →
PostgreSQL, both into `dst.t`), never run: each is verified
(`POST …/verify`) and timed from the call to the verification's own
`finished_at`. The reference is reading both tables once, one after the
other: a binary `COPY … TO STDOUT` of each PostgreSQL table, and the
MariaDB table through `mariadb -B` (its text protocol). Also: Sluice's peak
RSS during each verification, and a check that one changed value is found
by its key.

    cargo build --release
    python3 benches/verify.py          # ROWS=1000000
    PROFILE=/tmp/perf.data python3 benches/verify.py   # and `perf record` the server during PG → PG

The targets (issue 31): PostgreSQL → PostgreSQL at most 1.5× the two
COPYs, under 256 MiB; MariaDB → PostgreSQL measured and reported.
"""

import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pairs import MARIADB, mariadb  # noqa: E402
from service import Cluster  # noqa: E402
from sluicebench import BIN, peak_rss, reset_peak_rss, serve, stop  # noqa: E402

ROWS = int(os.environ.get("ROWS", "1000000"))


def verify(api, org, flow):
    """(seconds from the call to the verification's finish, the verification)."""
    start = time.time()
    v = api.call("POST", f"/v1/organizations/{org}/flows/{flow}/verify", {})
    while True:
        v = api.call("GET", f"/v1/organizations/{org}/verifications/{v['id']}")
        if v["finished_at"]:
            return datetime.datetime.fromisoformat(v["finished_at"]).timestamp() - start, v
        time.sleep(0.05)


def main():
    if not os.path.exists(BIN):
        sys.exit(f"no release binary at {BIN}: cargo build --release")
    work = tempfile.mkdtemp(prefix="sluice-verify-bench-")
    os.chmod(work, 0o755)
    tag = os.path.basename(work).split("-")[-1].lower().replace("_", "")
    my_db = f"verify_src_{tag}"
    pg, sluice, made_db = None, None, False
    try:
        pg = Cluster(work)
        pg.schemas_table(ROWS)
        pg.psql("CREATE TABLE dst.t (LIKE src.t INCLUDING ALL); INSERT INTO dst.t SELECT * FROM src.t")
        pg.psql("VACUUM ANALYZE src.t")
        pg.psql("VACUUM ANALYZE dst.t")
        iso = "to_char({} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
        flat = f"SELECT id, a, s, j, n, {iso.format('ts1')}, {iso.format('updated')} FROM src.t ORDER BY id"
        plain_csv = os.path.join(work, "plain.csv")
        subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-d", "bench",
                        "-v", "ON_ERROR_STOP=1", "-c", f"\\copy ({flat}) TO '{plain_csv}' (FORMAT csv)"], check=True)
        mariadb(f"CREATE DATABASE {my_db}")
        made_db = True
        mariadb("""CREATE TABLE t (id bigint PRIMARY KEY, a bigint NOT NULL, s text, j json, n decimal(12,2),
                   ts1 datetime(6), updated datetime(6) NOT NULL)""", db=my_db)
        mariadb(f"""LOAD DATA LOCAL INFILE '{plain_csv}' INTO TABLE t FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '"'
                    (id, a, s, j, n, @ts1, @up)
                    SET ts1 = STR_TO_DATE(@ts1, '%Y-%m-%dT%H:%i:%s.%fZ'), updated = STR_TO_DATE(@up, '%Y-%m-%dT%H:%i:%s.%fZ')""",
                db=my_db)

        # Reading both tables once.
        copy = lambda table: pg.shell(f"{pg.q(f'COPY {table} TO STDOUT (FORMAT binary)')} > /dev/null")  # noqa: E731
        pg_src, pg_dst = copy("src.t"), copy("dst.t")
        my_read = pg.shell(f"mariadb -h {MARIADB['host']} -P {MARIADB['port']} -u {MARIADB['user']} -N -B -D {my_db} "
                           "-e 'SELECT * FROM t' > /dev/null")

        sluice, api = serve(work)
        org = api.call("POST", "/v1/organizations", {"name": "bench"})["id"]
        conns = f"/v1/organizations/{org}/connections"
        pgc = lambda name, schema, cap: api.call("POST", conns, {  # noqa: E731
            "name": name, "type": "postgres", "capability": cap,
            "config": {"host": "127.0.0.1", "port": pg.port, "database": "bench", "user": "postgres",
                       "schema": schema, "sslmode": "disable"}})["id"]
        src, dst = pgc("pg-src", "src", "source"), pgc("pg-dst", "dst", "both")
        my = api.call("POST", conns, {"name": "maria", "type": "mysql", "capability": "source",
                                      "config": {"host": MARIADB["host"], "port": MARIADB["port"], "database": my_db,
                                                 "user": MARIADB["user"]}})["id"]
        mapping = {"source_entity": "t", "sync_mode": "full_refresh_overwrite", "primary_key": "id"}
        flow = lambda name, source: api.call("POST", f"/v1/organizations/{org}/flows", {  # noqa: E731
            "name": name, "source_connection_id": source, "destination_connection_id": dst,
            "config": {"mappings": [mapping]}})["id"]
        pg_flow, my_flow = flow("pg-to-pg", src), flow("maria-to-pg", my)

        results = []
        for name, f, reference in [("PostgreSQL → PostgreSQL", pg_flow, pg_src + pg_dst),
                                   ("MariaDB → PostgreSQL", my_flow, my_read + pg_dst)]:
            reset_peak_rss(sluice)
            perf = None
            if os.environ.get("PROFILE") and f == pg_flow:  # a profile of the server during this one
                perf = subprocess.Popen(["perf", "record", "-F", "499", "-g", "-p", str(sluice.pid), "-o",
                                         os.environ["PROFILE"]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(0.5)
            secs, v = verify(api, org, f)
            if perf:
                perf.send_signal(2)
                perf.wait()
            e = v["entities"][0] if v["entities"] else {}
            if v["status"] != "matched" or e.get("source_rows") != ROWS or e.get("destination_rows") != ROWS:
                sys.exit(f"{name}: not a clean match: {json.dumps(v)}")
            began = datetime.datetime.fromisoformat(v["started_at"]).timestamp() - (
                datetime.datetime.fromisoformat(v["finished_at"]).timestamp() - secs)
            results.append((name, secs, reference, peak_rss(sluice), began, e.get("duration_ms"), e.get("summed_rows")))

        # One value changed is found by its key.
        pg.psql("UPDATE dst.t SET s = 'changed' WHERE id = 4242")
        _, v = verify(api, org, pg_flow)
        found = v["entities"][0]["different"]
        if v["status"] != "mismatched" or found != {"count": 1, "keys": [4242]}:
            sys.exit(f"the changed row was not found by its key: {json.dumps(v)}")

        print(f"\n{ROWS:,} rows, one run on this machine\n")
        print("| pair | verification | both tables read once | ratio | peak RSS |")
        print("|---|---|---|---|---|")
        for name, secs, reference, rss, *_ in results:
            print(f"| {name} | {secs:.2f} s | {reference:.2f} s | {secs / reference:.2f}× | {rss} |")
        for name, secs, _, _, began, entity_ms, summed in results:
            print(f"{name}: started {began:.2f} s after the call; the entity took {entity_ms} ms; "
                  f"{summed:,} rows compared by checksums in the databases")
        print(f"\n(PostgreSQL COPY: src {pg_src:.2f} s, dst {pg_dst:.2f} s; MariaDB read {my_read:.2f} s; "
              "the changed row was found by its key)")
    finally:
        if sluice:
            stop(sluice)
        if made_db:
            mariadb(f"DROP DATABASE IF EXISTS {my_db}")
        if pg:
            pg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
