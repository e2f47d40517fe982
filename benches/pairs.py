#!/usr/bin/env python3
"""Every other connector pair, as users run them, against Sling and ingestr:
the benchmark table of `service.py` (bigint key, bigint, text, json,
numeric(12,2), two timestamps) in a throwaway PostgreSQL cluster with
deployment settings, the same rows in the machine's MariaDB (a database of
this run), in a SQLite file, and in CSV and JSON Lines files; `sluice serve`
on its embedded store; one full refresh (full_refresh_overwrite) per pair
through the API, timed from the call that triggers the run to the run's
record saying it finished.

Pairs: PostgreSQL → MariaDB, SQLite, CSV, JSON Lines, and each of those →
PostgreSQL. Each timing is the median of --rounds, each round begun after
a CHECKPOINT on a quiet machine (at least 90% idle over a second, or
flagged NOISY after 180 s); after every load the
destination is checked equal to the source (count, distinct keys, sum of a
bigint column, sum of the numeric one). The peers run the same pairs when
installed (Sling from PyPI `sling-linux-amd64` or $SLING, ingestr from PyPI
`ingestr==1.1.22`); a pair a peer cannot do is shown as such.

    cargo build --release
    benches/pairs.py                        # 1,000,000 rows, 3 rounds
    benches/pairs.py --rows 200000 --rounds 1 --only mariadb
    benches/pairs.py --only mariadb --cpu   # and each program's CPU seconds per run, and the floor they set

The target (issue 18): Sluice at least 2× the rows/s of the faster peer on
every pair. Needs what `service.py` needs, and MariaDB at 127.0.0.1:3306
(root, no password) with the `mariadb` client.
"""

import argparse
import csv
import decimal
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

from service import Cluster, sling_binary
from sluicebench import BIN, CpuMeter, peak_rss, reset_peak_rss, serve, stop, wait_quiet

MARIADB = {"host": "127.0.0.1", "port": 3306, "user": "root"}
COLUMNS = ["id", "a", "s", "j", "n", "ts1", "updated"]
PAIRS = ["PostgreSQL → MariaDB", "PostgreSQL → SQLite", "PostgreSQL → CSV", "PostgreSQL → JSON Lines", "MariaDB → PostgreSQL",
         "SQLite → PostgreSQL", "CSV → PostgreSQL", "PostgreSQL → PostgreSQL", "PostgreSQL → PostgreSQL, transformed",
         "JSON Lines → PostgreSQL"]


def mariadb(sql, db=None):
    argv = ["mariadb", "-h", MARIADB["host"], "-P", str(MARIADB["port"]), "-u", MARIADB["user"], "--local-infile=1", "-N", "-B"]
    if db:
        argv += ["-D", db]
    return subprocess.run(argv + ["-e", sql], check=True, capture_output=True, text=True).stdout.strip()


def fingerprint(rows):
    """(count, distinct ids, sum(a), sum(n)) of an iterable of (id, a, n)."""
    count, ids, sum_a, sum_n = 0, set(), 0, decimal.Decimal(0)
    for i, a, n in rows:
        count += 1
        ids.add(int(i))
        sum_a += int(a)
        sum_n += decimal.Decimal(str(n))
    return (count, len(ids), sum_a, sum_n.quantize(decimal.Decimal("0.01")))


def norm(count, ids, sum_a, sum_n):
    return (int(count), int(ids), int(decimal.Decimal(sum_a)), decimal.Decimal(str(sum_n)).quantize(decimal.Decimal("0.01")))


def close(got, want):
    """A peer's load equals the source: counts and sum(a) exactly, sum(n)
    within a cent per 10,000 rows (a peer that loads the numeric column as
    a float sums it with rounding error). Sluice's loads must be exact."""
    return got[:3] == want[:3] and abs(got[3] - want[3]) <= decimal.Decimal(want[0]) / 1_000_000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-peers", action="store_true", help="skip Sling and ingestr even when installed")
    ap.add_argument("--only", help="only the pairs whose name contains this (e.g. mariadb, csv)")
    ap.add_argument("--cpu", action="store_true",
                    help="also the CPU seconds each program took per run, its busiest thread's, and the floor they set")
    args = ap.parse_args()
    if not os.access(BIN, os.X_OK):
        sys.exit(f"no release binary at {BIN}: cargo build --release")
    rows, rounds = args.rows, args.rounds
    work = tempfile.mkdtemp(prefix="sluice-pairs-bench-")
    os.chmod(work, 0o755)
    tag = os.path.basename(work).split("-")[-1].lower().replace("_", "")
    src_db, dst_db = f"pairs_src_{tag}", f"pairs_dst_{tag}"
    pg, sluice, made_dbs = None, None, False
    try:
        pg = Cluster(work)
        pg.schemas_table(rows)
        pg.psql("VACUUM ANALYZE src.t")
        want = norm(*pg.psql("SELECT count(*), count(DISTINCT id), sum(a), sum(n) FROM src.t").split("|"))

        # The same rows in every other kind of source.
        files = os.path.join(work, "files")
        iso = "to_char({} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
        flat = f"SELECT id, a, s, j, n, {iso.format('ts1')} AS ts1, {iso.format('updated')} AS updated FROM src.t ORDER BY id"
        plain_csv = os.path.join(work, "plain.csv")
        subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-d", "bench", "-v", "ON_ERROR_STOP=1",
                        "-c", f"\\copy ({flat}) TO '{plain_csv}' (FORMAT csv, HEADER)"], check=True)
        mariadb(f"CREATE DATABASE {src_db}; CREATE DATABASE {dst_db}")
        made_dbs = True
        mariadb("""CREATE TABLE t (id bigint PRIMARY KEY, a bigint NOT NULL, s text, j json, n decimal(12,2),
                   ts1 datetime(6), updated datetime(6) NOT NULL)""", db=src_db)
        # (--only builds only the sources its pairs read.)
        chosen = [n for n in PAIRS if not args.only or args.only.lower() in n.lower()]
        need = lambda kind: any(kind in n.split(" → ")[0].lower() for n in chosen)
        if need("mariadb"):
            mariadb(f"""LOAD DATA LOCAL INFILE '{plain_csv}' INTO TABLE t FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '"'
                        IGNORE 1 LINES (id, a, s, j, n, @ts1, @up)
                        SET ts1 = STR_TO_DATE(@ts1, '%Y-%m-%dT%H:%i:%s.%fZ'), updated = STR_TO_DATE(@up, '%Y-%m-%dT%H:%i:%s.%fZ')""",
                    db=src_db)
            loaded = norm(*mariadb("SELECT count(*), count(DISTINCT id), sum(a), sum(n) FROM t", db=src_db).split("\t"))
            zero = mariadb("SELECT count(*) FROM t WHERE updated < '2000-01-01' OR ts1 < '2000-01-01'", db=src_db)
            if loaded != want or zero != "0":
                sys.exit(f"MariaDB's copy of the table differs: {loaded} against {want}, {zero} dates lost")
        def records():  # streamed: 10M rows do not fit in a list of dicts
            with open(plain_csv, newline="") as f:
                yield from csv.DictReader(f)
        print(f"table: {rows:,} rows in PostgreSQL {pg.bin.split('/')[-2]} (port {pg.port}, shared_buffers 1GB), "
              f"MariaDB ({src_db}), SQLite, CSV and JSON Lines; {rounds} round(s) each\n", flush=True)

        # The service, on its embedded store.
        sluice, api = serve(work)
        org = api.call("POST", f"/v1/organizations", {"name": "Pairs bench"})["id"]
        home = os.path.join(files, org)
        os.makedirs(os.path.join(home, "in_csv"))
        os.makedirs(os.path.join(home, "in_jsonl"))
        shutil.copy(plain_csv, os.path.join(home, "in_csv", "t.csv"))
        in_jsonl = os.path.join(home, "in_jsonl", "t.jsonl")
        with open(in_jsonl, "w") as out:
            for r in records() if need("json") else []:
                out.write(json.dumps({"id": int(r["id"]), "a": int(r["a"]), "s": r["s"], "j": json.loads(r["j"]),
                                      "n": float(r["n"]), "ts1": r["ts1"], "updated": r["updated"]}) + "\n")
        in_sqlite = os.path.join(home, "src.db")
        lite = sqlite3.connect(in_sqlite)
        lite.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER NOT NULL, s TEXT, j TEXT, n NUMERIC, ts1 TEXT, updated TEXT NOT NULL)")
        lite.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?)",
                         ((int(r["id"]), int(r["a"]), r["s"], r["j"], r["n"], r["ts1"], r["updated"])
                          for r in (records() if need("sqlite") else [])))
        lite.commit()
        lite.close()

        def conn(name, kind, config):
            return api.call("POST", f"/v1/organizations/{org}/connections",
                            {"name": name, "type": kind, "capability": "both", "config": config})["id"]

        pg_cfg = {"host": "127.0.0.1", "port": pg.port, "database": "bench", "user": "postgres", "sslmode": "disable"}
        c = {
            "pg_src": conn("pg-src", "postgres", dict(pg_cfg, schema="src")),
            "pg_dst": conn("pg-dst", "postgres", dict(pg_cfg, schema="dst")),
            "my_src": conn("my-src", "mysql", dict(MARIADB, database=src_db)),
            "my_dst": conn("my-dst", "mysql", dict(MARIADB, database=dst_db)),
            "lite_src": conn("lite-src", "sqlite", {"path": "src.db"}),
            "lite_dst": conn("lite-dst", "sqlite", {"path": "dst.db"}),
            "csv_src": conn("csv-src", "file", {"path": "in_csv", "format": "csv"}),
            "csv_dst": conn("csv-dst", "file", {"path": "out_csv", "format": "csv"}),
            "jsonl_src": conn("jsonl-src", "file", {"path": "in_jsonl", "format": "jsonl"}),
            "jsonl_dst": conn("jsonl-dst", "file", {"path": "out_jsonl", "format": "jsonl"}),
        }

        # How each kind of destination is read back.
        def check_pg(table):
            # Cast: a peer may load numbers as text (ingestr from CSV).
            return norm(*pg.psql(f"SELECT count(*), count(DISTINCT id), sum(a::numeric), sum(n::numeric) FROM dst.{table}").split("|"))

        def check_my(table):
            return norm(*mariadb(f"SELECT count(*), count(DISTINCT id), sum(a), sum(n) FROM {table}", db=dst_db).split("\t"))

        def check_lite(path, table):
            with sqlite3.connect(path) as db:
                return fingerprint(db.execute(f"SELECT id, a, CAST(n AS TEXT) FROM {table}"))

        def check_csv(path):
            with open(path, newline="") as f:
                return fingerprint((r["id"], r["a"], r["n"]) for r in csv.DictReader(f))

        def check_jsonl(path):
            with open(path) as f:
                return fingerprint((r["id"], r["a"], r["n"]) for r in map(json.loads, f))

        pg_uri = f"postgresql://postgres@127.0.0.1:{pg.port}/bench?sslmode=disable"
        my = lambda db: f"mysql://root@127.0.0.1:3306/{db}"
        # name: (source, destination, Sluice's destination check, Sling's
        # source, target and check, ingestr's source, target and check).
        out_dir = os.path.join(work, "peers")
        os.makedirs(out_dir)
        pairs = {
            "PostgreSQL → MariaDB": dict(
                src="pg_src", entity="t", dst="my_dst", check=lambda t: check_my(t),
                sling=(("PG", pg_uri, "src.t"), ("MY", my(dst_db), f"{dst_db}.sling_t"), lambda: check_my("sling_t")),
                ingestr=((pg_uri, "src.t"), (my(dst_db), f"{dst_db}.ingestr_t"), lambda: check_my("ingestr_t"))),
            "PostgreSQL → SQLite": dict(
                src="pg_src", entity="t", dst="lite_dst", check=lambda t: check_lite(os.path.join(home, "dst.db"), t),
                sling=(("PG", pg_uri, "src.t"), ("LITE", f"sqlite://{out_dir}/sling.db", "main.sling_t"),
                       lambda: check_lite(f"{out_dir}/sling.db", "sling_t")),
                ingestr=((pg_uri, "src.t"), (f"sqlite:///{out_dir}/ingestr.db", "main.ingestr_t"),
                         lambda: check_lite(f"{out_dir}/ingestr.db", "ingestr_t"))),
            "PostgreSQL → CSV": dict(
                src="pg_src", entity="t", dst="csv_dst", check=lambda t: check_csv(os.path.join(home, "out_csv", f"{t}.csv")),
                sling=(("PG", pg_uri, "src.t"), (None, None, f"file://{out_dir}/sling.csv"), lambda: check_csv(f"{out_dir}/sling.csv")),
                ingestr=((pg_uri, "src.t"), (f"csv://{out_dir}/ingestr.csv", "ingestr"), lambda: check_csv(f"{out_dir}/ingestr.csv"))),
            "PostgreSQL → JSON Lines": dict(
                src="pg_src", entity="t", dst="jsonl_dst", check=lambda t: check_jsonl(os.path.join(home, "out_jsonl", f"{t}.jsonl")),
                sling=(("PG", pg_uri, "src.t"), (None, None, f"file://{out_dir}/sling.jsonl"), lambda: check_jsonl(f"{out_dir}/sling.jsonl")),
                ingestr=None),
            "MariaDB → PostgreSQL": dict(
                src="my_src", entity="t", dst="pg_dst", check=check_pg,
                sling=(("MY", my(src_db), f"{src_db}.t"), ("PG", pg_uri, "dst.sling_my"), lambda: check_pg("sling_my")),
                ingestr=((my(src_db), f"{src_db}.t"), (pg_uri, "dst.ingestr_my"), lambda: check_pg("ingestr_my"))),
            "SQLite → PostgreSQL": dict(
                src="lite_src", entity="t", dst="pg_dst", check=check_pg,
                sling=(("LITE", f"sqlite://{in_sqlite}", "main.t"), ("PG", pg_uri, "dst.sling_lite"), lambda: check_pg("sling_lite")),
                ingestr=((f"sqlite:///{in_sqlite}", "t"), (pg_uri, "dst.ingestr_lite"), lambda: check_pg("ingestr_lite"))),
            "CSV → PostgreSQL": dict(
                src="csv_src", entity="t", dst="pg_dst", check=check_pg,
                sling=((None, None, f"file://{home}/in_csv/t.csv"), ("PG", pg_uri, "dst.sling_csv"), lambda: check_pg("sling_csv")),
                ingestr=((f"csv://{home}/in_csv/t.csv", "t"), (pg_uri, "dst.ingestr_csv"), lambda: check_pg("ingestr_csv"))),
            # The decoded path with a transform (rename, mask, drop), beside
            # the same pair without one (the undecoded binary COPY pipe).
            "PostgreSQL → PostgreSQL": dict(src="pg_src", entity="t", dst="pg_dst", check=check_pg, sling=None, ingestr=None),
            "PostgreSQL → PostgreSQL, transformed": dict(
                src="pg_src", entity="t", dst="pg_dst", check=check_pg, sling=None, ingestr=None,
                transform=[{"op": "rename", "from": "s", "to": "label"}, {"op": "mask", "field": "label"},
                           {"op": "drop", "field": "ts1"}]),
            "JSON Lines → PostgreSQL": dict(
                src="jsonl_src", entity="t", dst="pg_dst", check=check_pg,
                sling=((None, None, f"file://{in_jsonl}"), ("PG", pg_uri, "dst.sling_jsonl"), lambda: check_pg("sling_jsonl")),
                ingestr=None),
        }
        assert list(pairs) == PAIRS, "PAIRS names every pair, in order"
        pairs = {k: pairs[k] for k in chosen}

        sling = None if args.no_peers else sling_binary()
        ingestr = None if args.no_peers else shutil.which("ingestr")

        def peer(argv, extra_env):
            start = time.perf_counter()
            out = subprocess.run(argv, env=dict(os.environ, SLING_DISABLE_TELEMETRY="true", **extra_env),
                                 capture_output=True, text=True)
            secs = time.perf_counter() - start
            return secs, None if out.returncode == 0 else (out.stdout + out.stderr).strip().splitlines()[-1:]

        def sling_run(spec):
            (sname, suri, stream), (tname, turi, obj), _ = spec
            argv = [sling, "run", "--src-stream", stream, "--tgt-object", obj, "--mode", "full-refresh"]
            if stream.endswith(".jsonl"):
                argv += ["--src-options", '{"flatten": true}']  # else one jsonb column of whole records
            extra = {}
            for flag, name, uri in (("--src-conn", sname, suri), ("--tgt-conn", tname, turi)):
                if name:
                    argv += [flag, name]
                    extra[name] = uri
            return peer(argv, extra)

        def ingestr_run(spec):
            (suri, stable), (duri, dtable), _ = spec
            return peer([ingestr, "ingest", "--source-uri", suri, "--source-table", stable, "--dest-uri", duri,
                         "--dest-table", dtable, "--yes"], {})

        results = []
        noisy = []
        cpu = {}  # (pair, program) -> [CpuMeter.summary() of each round]

        def metered(pair, program, fn):
            """fn(), under a CpuMeter when --cpu asks for one."""
            if not args.cpu:
                return fn()
            with CpuMeter() as m:
                out = fn()
            cpu.setdefault((pair, program), []).append(m.summary())
            return out

        def settle(step):
            """Each timed run begins after a CHECKPOINT on a quiet machine
            (what the run before left behind, in either server, done), as in
            `service.py`; one that found the machine still busy is flagged."""
            pg.psql("CHECKPOINT")
            if not wait_quiet():
                noisy.append(step)

        for name, p in pairs.items():
            entity = "t_" + p["src"].split("_")[0] + ("_x" if "transform" in p else "")
            mapping = {"source_entity": p["entity"], "dest_entity": entity, "sync_mode": "full_refresh_overwrite"}
            if "transform" in p:
                mapping["transform"] = p["transform"]
            flow = api.call("POST", f"/v1/organizations/{org}/flows", {
                "name": name, "source_connection_id": c[p["src"]], "destination_connection_id": c[p["dst"]],
                "config": {"mappings": [mapping]}})["id"]
            ours = []
            reset_peak_rss(sluice)
            for _ in range(rounds):
                settle(f"Sluice {name}")
                secs, _ = metered(name, "Sluice", lambda: api.run(org, flow))
                ours.append(secs)
                got = p["check"](entity)
                if got != want:
                    sys.exit(f"{name}: Sluice's destination differs from the source: {got} against {want}")
            rss = peak_rss(sluice)
            peers = {}
            for peer_name, binary, run, spec in (("Sling", sling, sling_run, p["sling"]), ("ingestr", ingestr, ingestr_run, p["ingestr"])):
                if not binary:
                    continue
                if spec is None:
                    peers[peer_name] = "cannot"
                    continue
                times = []
                for _ in range(rounds):
                    settle(f"{peer_name} {name}")
                    secs, failed = metered(name, peer_name, lambda: run(spec))
                    if failed:
                        times = f"failed: {failed[0][:120] if failed else ''}"
                        break
                    try:
                        got = spec[2]()
                    except Exception as e:  # noqa: BLE001 (a peer's missing or unreadable output)
                        times = f"no readable output: {str(e)[:120]}"
                        break
                    if not close(got, want):
                        times = f"differs: {got}"
                        break
                    times.append(secs)
                peers[peer_name] = times
            results.append((name, ours, peers, rss))
            line = f"{name:<26} Sluice {statistics.median(ours):7.2f} s (peak RSS {rss})"
            for n, t in peers.items():
                line += f" | {n} " + (f"{statistics.median(t):7.2f} s" if isinstance(t, list) else t)
            print(line, flush=True)

        print(f"\n{'pair (full refresh)':<26} {'Sluice s':>9} {'rows/s':>11} {'Sling s':>9} {'ingestr s':>10} {'× faster peer':>14} {'peak RSS':>12}")
        for name, ours, peers, rss in results:
            o = statistics.median(ours)
            cells, best = [], None
            for n in ("Sling", "ingestr"):
                t = peers.get(n)
                if isinstance(t, list):
                    m = statistics.median(t)
                    best = m if best is None else min(best, m)
                    cells.append(f"{m:.2f}")
                else:
                    cells.append("—" if t is None else ("n/a" if t == "cannot" else "fails"))
            ratio = f"{best / o:.2f}×" if best else "—"
            print(f"{name:<26} {o:>9.2f} {rows / o:>11,.0f} {cells[0]:>9} {cells[1]:>10} {ratio:>14} {rss:>12}")
        if cpu:
            print("\nCPU seconds per run (mean of the rounds), by program, and the busiest single thread; on "
                  f"{os.cpu_count()} cores a run cannot end sooner than the floor, max(all / cores, busiest thread)")
            print(f"{'pair':<26} {'program':<8} {'wall s':>7} {'PostgreSQL':>10} {'MariaDB':>8} {'itself':>7} "
                  f"{'all':>6} {'busiest thread':>22} {'floor s':>8}")
            for name, ours, peers, _ in results:
                for program, times in [("Sluice", ours)] + list(peers.items()):
                    runs = cpu.get((name, program))
                    if not runs or not isinstance(times, list):
                        continue
                    mean = lambda key: statistics.mean(r.get(key, 0.0) for r in runs)
                    busy = max((r["busiest"] for r in runs), key=lambda b: b[1])
                    busy_mean = statistics.mean(r["busiest"][1] for r in runs)
                    floor = max(mean("all") / os.cpu_count(), busy_mean)
                    print(f"{name:<26} {program:<8} {statistics.median(times):>7.2f} {mean('PostgreSQL'):>10.2f} "
                          f"{mean('MariaDB'):>8.2f} {mean(program):>7.2f} {mean('all'):>6.2f} "
                          f"{busy[0] + f' {busy_mean:.2f}':>22} {floor:>8.2f}")
        for name, _, peers, _ in results:
            for n, t in peers.items():
                if isinstance(t, str) and t != "cannot":
                    print(f"  {n} on {name}: {t}")
        if args.no_peers:
            print("(Sling and ingestr skipped: --no-peers)")
        if noisy:
            print(f"NOISY: the machine was still busy (under 90% idle after 180 s) before: {', '.join(sorted(set(noisy)))}")
        else:
            print("every run began on a quiet machine (at least 90% idle over a second, after a CHECKPOINT)")
        print("\nevery Sluice destination equals the source (count, distinct keys, sum(a), sum(n)); "
              "n/a: the peer has no such source or destination")
        print("peak RSS: of sluice serve during the pair's own runs (the peak reset before each pair)")
    finally:
        if sluice:
            stop(sluice)
        if made_dbs:
            mariadb(f"DROP DATABASE IF EXISTS {src_db}; DROP DATABASE IF EXISTS {dst_db}")
        if pg:
            pg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
