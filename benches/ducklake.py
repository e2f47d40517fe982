#!/usr/bin/env python3
"""PostgreSQL → DuckLake, the way users run each tool: issue 50's benchmark.
A throwaway PostgreSQL cluster (as `service.py` makes it) holds the service
benchmark's `current` table of 1,000,000 rows; `sluice serve` on its
embedded store writes it through the API into a `ducklake` connection (a
SQLite catalog, local data; default settings) three ways:

- full refresh (`full_refresh_overwrite`), each round a new snapshot;
- the first incremental load by key (`incremental_deduped` on `id`, cursor
  `updated`), then the 1% incremental: every hundredth row updated past the
  greatest cursor, applied by key (delete files and new rows).

The peers run on the same table in the same run, each with its defaults but
for the DuckLake target, when installed (their own venv: `PEERS=/path/bin`):

- dlt: `sql_table` into `dlt.destinations.ducklake` (a SQLite catalog),
  `replace` for the full refresh, `merge` on `id` with `incremental("updated")`
  for the rest;
- Sling: a `ducklake` connection (`catalog_type: sqlite`), `full-refresh` and
  `incremental` (`--primary-key id --update-key updated`).

Both drive DuckDB, which installs its extensions from the network; offline,
hand them a home folder (`PEERS_HOME`, else one made here) whose
`.duckdb/extensions/v1.5.5/linux_amd64/` holds the ducklake, parquet,
sqlite_scanner, json and httpfs extensions (copied from their PyPI wheels in
the peers' venv), and Sling its DuckDB CLI (`DUCKDB_PATH`, PyPI's
`duckdb-cli`).

Every lake is read back by DuckDB 1.5.5 with the ducklake extension (the
lake readers' venv, `.ci/venv`): count, distinct ids and sum(a) must equal
the source after each step, or the tool is reported and not timed. Figures
are medians of `--rounds` runs; peak RSS is `VmHWM` (Sluice, since a reset
before its runs) or `/usr/bin/time`'s maximum resident set (the peers).

    cargo build --release
    PEERS=/tmp/peers/bin benches/ducklake.py [--rows N] [--rounds N] [--no-peers]
"""

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lake import timed  # noqa: E402
from service import SHAPES, Cluster, sling_binary  # noqa: E402
from sluicebench import BIN, ROOT, peak_rss, reset_peak_rss, serve, stop, wait_quiet  # noqa: E402

LAKE_PYTHON = os.environ.get("LAKE_PYTHON", os.path.join(ROOT, ".ci", "venv", "bin", "python3"))

READ = """
import glob, json, os, sys, duckdb
import duckdb_extension_ducklake, duckdb_extension_parquet, duckdb_extension_sqlite_scanner
def ext(mod, name):
    return glob.glob(os.path.join(os.path.dirname(mod.__file__), "extensions", "*", name + ".duckdb_extension"))[0]
c = duckdb.connect(config={"allow_unsigned_extensions": True, "autoinstall_known_extensions": False,
    "autoload_known_extensions": False})
for m, n in [(duckdb_extension_parquet, "parquet"), (duckdb_extension_sqlite_scanner, "sqlite_scanner"),
             (duckdb_extension_ducklake, "ducklake")]:
    c.execute(f"LOAD '{ext(m, n)}'")
c.execute(f"ATTACH 'ducklake:sqlite:{sys.argv[1]}' AS lake (READ_ONLY)")
print(json.dumps(c.execute(f"SELECT count(*), count(DISTINCT id), sum(a) FROM lake.{sys.argv[2]}").fetchone(),
    default=str))
"""


def lake_sums(catalog, table):
    """count, distinct ids and sum(a) of DuckLake table `table` (schema.name)."""
    out = subprocess.run([LAKE_PYTHON, "-c", READ, catalog, table], capture_output=True, text=True)
    if out.returncode != 0:
        return ("unreadable", out.stderr.strip().splitlines()[-1:] or [""])
    return tuple(int(x) for x in json.loads(out.stdout))


DLT = """
import sys, dlt
from dlt.sources.sql_database import sql_table
from dlt.destinations.impl.ducklake.configuration import DuckLakeCredentials
src, catalog, data, state, mode = sys.argv[1:6]
lake = dlt.destinations.ducklake(credentials=DuckLakeCredentials("lake", catalog=f"sqlite:///{catalog}",
                                                                 storage=data))
p = dlt.pipeline(pipeline_name="bench", destination=lake, dataset_name="bench", pipelines_dir=state)
if mode == "full":
    p.run(sql_table(credentials=src, table="t", schema="public"), write_disposition="replace")
else:
    t = sql_table(credentials=src, table="t", schema="public", incremental=dlt.sources.incremental("updated"),
                  primary_key="id")
    p.run(t, write_disposition="merge")
"""


def peers_home(work, peers):
    """A home folder with DuckDB 1.5.5's extensions where DuckDB looks
    for installed ones (copied from the peers' venv wheels)."""
    if os.environ.get("PEERS_HOME"):
        return os.environ["PEERS_HOME"]
    home = os.path.join(work, "home")
    into = os.path.join(home, ".duckdb", "extensions", "v1.5.5", "linux_amd64")
    os.makedirs(into)
    site = glob.glob(os.path.join(os.path.dirname(peers), "lib", "python3*", "site-packages"))
    for s in site:
        for f in glob.glob(os.path.join(s, "duckdb_extension_*", "extensions", "*", "*.duckdb_extension")):
            shutil.copy(f, into)
    return home


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-peers", action="store_true")
    args = ap.parse_args()
    if not os.access(BIN, os.X_OK):
        sys.exit(f"no release binary at {BIN}: cargo build --release")
    work = tempfile.mkdtemp(prefix="sluice-ducklake-bench-")
    os.chmod(work, 0o755)
    pg = sluice = None
    shape = SHAPES["current"]
    try:
        pg = Cluster(work)
        src_db, _ = pg.bench_table(shape, args.rows, False)
        width = pg.psql("SELECT round(avg(pg_column_size(t.*))) FROM t", db=src_db)
        print(f"current table: {args.rows:,} rows, average row {width} bytes; 1% = {args.rows // 100:,} rows; "
              f"PostgreSQL {pg.bin.split('/')[-2]} on port {pg.port}; {args.rounds} round(s) each", flush=True)

        def want():
            return tuple(int(x) for x in
                         pg.psql("SELECT count(*), count(DISTINCT id), sum(a) FROM t", db=src_db).split("|"))

        def touch():
            """The 1% incremental's change: every hundredth row, past the
            greatest cursor."""
            frm = pg.psql("SELECT max(updated) FROM t", db=src_db)
            pg.psql(shape["update"].format(frm=frm), db=src_db)

        def quiet():
            pg.psql("CHECKPOINT", db="postgres")
            wait_quiet()

        results = {}

        def record(tool, step, times, rss, got):
            expected = want()
            if got != expected:
                said = f"{tool} {step}: DuckDB reads {got}, the source holds {expected}"
                if tool == "Sluice":
                    sys.exit(said)
                print(f"{said}: not counted", flush=True)
                return False
            med = statistics.median(times)
            results[(tool, step)] = med
            print(f"{tool} {step}: median {med:.2f} s ({', '.join(f'{t:.2f}' for t in times)}), peak RSS {rss}; "
                  f"DuckDB reads {got[0]:,} rows, each id once, sum(a) equal", flush=True)
            return True

        # Sluice, through the API, with default settings.
        sluice, api = serve(work)
        org = api.call("POST", "/v1/organizations", {"name": "DuckLake bench"})["id"]
        conns = f"/v1/organizations/{org}/connections"
        src = api.call("POST", conns, {"name": "src", "type": "postgres", "capability": "source", "config": {
            "host": "127.0.0.1", "port": pg.port, "database": src_db, "user": "postgres", "schema": "public",
            "sslmode": "disable"}})["id"]
        lake_dir = os.path.join(work, "files", org, "lake")
        dst = api.call("POST", conns, {"name": "lake", "type": "ducklake", "capability": "destination", "config": {
            "catalog": {"type": "sqlite", "path": "lake/catalog.sqlite"}, "data_path": "lake/data"}})["id"]
        catalog = os.path.join(lake_dir, "catalog.sqlite")

        def flow(name, entity, mapping):
            return api.call("POST", f"/v1/organizations/{org}/flows", {
                "name": name, "source_connection_id": src, "destination_connection_id": dst,
                "config": {"mappings": [dict(mapping, source_entity="t", dest_entity=entity)]}})["id"]

        full = flow("full", "full_t", {"sync_mode": "full_refresh_overwrite"})
        inc = flow("incremental", "inc_t", {"sync_mode": "incremental_deduped", "cursor_field": "updated",
                                            "primary_key": "id"})
        reset_peak_rss(sluice)
        times = []
        for _ in range(args.rounds):
            quiet()
            times.append(api.run(org, full)[0])
        record("Sluice", "full refresh", times, f"{int(peak_rss(sluice).split()[0]) / 1024:.0f} MiB",
               lake_sums(catalog, "main.full_t"))
        quiet()
        first = api.run(org, inc)[0]
        record("Sluice", "first incremental load", [first], "", lake_sums(catalog, "main.inc_t"))
        times = []
        for _ in range(args.rounds):
            touch()
            quiet()
            times.append(api.run(org, inc)[0])
        record("Sluice", "1% incremental by key", times,
               f"{int(peak_rss(sluice).split()[0]) / 1024:.0f} MiB (all steps)", lake_sums(catalog, "main.inc_t"))
        stop(sluice)
        sluice = None

        if not args.no_peers:
            peers = os.environ.get("PEERS", "")
            home = peers_home(work, peers) if peers else os.environ.get("HOME", "")
            env = dict(os.environ, PATH=f"{peers}:{os.environ['PATH']}" if peers else os.environ["PATH"], HOME=home,
                       SLING_DISABLE_TELEMETRY="true", DLT_TELEMETRY_DISABLED="1", RUNTIME__DLTHUB_TELEMETRY="false",
                       PG_SRC=f"postgresql://postgres@127.0.0.1:{pg.port}/{src_db}?sslmode=disable")
            duckdb_cli = shutil.which("duckdb", path=peers or None)
            if duckdb_cli:
                env.setdefault("DUCKDB_PATH", duckdb_cli)
            python = shutil.which("python3", path=peers) if peers else None

            def peer(tool, steps):
                """`steps`: (step, argv, lake table, rounds, before each)."""
                for step, argv, table, catalog_of, n, before in steps:
                    times, rss = [], 0.0
                    for _ in range(n):
                        if before:
                            before()
                        quiet()
                        secs, peak = timed(argv, env)
                        if secs is None:
                            print(f"{tool} {step}: failed, not measured: {' | '.join(peak)}", flush=True)
                            return
                        times.append(secs)
                        rss = max(rss, peak)
                    if not record(tool, step, times, f"{rss:.0f} MiB", lake_sums(catalog_of, table)):
                        return

            if python and subprocess.run([python, "-c", "import dlt"], capture_output=True).returncode == 0:
                d = os.path.join(work, "dlt")
                os.makedirs(os.path.join(d, "data"))
                cat = os.path.join(d, "catalog.sqlite")
                uri = env["PG_SRC"].replace("postgresql://", "postgresql+psycopg2://")
                run = lambda mode, state: [python, "-c", DLT, uri, cat, os.path.join(d, "data") + "/",  # noqa: E731
                                           os.path.join(d, state), mode]
                peer("dlt", [
                    ("full refresh", run("full", "full"), "bench.t", cat, args.rounds, None),
                    ("first incremental load", run("inc", "inc"), "bench.t", cat, 1, None),
                    ("1% incremental by key", run("inc", "inc"), "bench.t", cat, args.rounds, touch),
                ])
            # PyPI's sling-linux-amd64 in the peers' venv ships the binary
            # in its package, with no script on the venv's PATH.
            shipped = glob.glob(os.path.join(os.path.dirname(peers), "lib", "python3*", "site-packages",
                                             "sling_linux_amd64", "bin", "sling-linux-amd64")) if peers else []
            sling = sling_binary() or shutil.which("sling", path=peers or None) or (shipped[0] if shipped else None)
            if sling:
                os.chmod(sling, 0o755)
            if sling:
                s = os.path.join(work, "sling")
                os.makedirs(os.path.join(s, "data"))
                cat = os.path.join(s, "catalog.sqlite")
                env["LAKE"] = json.dumps({"type": "ducklake", "catalog_type": "sqlite", "catalog_conn_string": cat,
                                          "data_path": os.path.join(s, "data")})
                base = [sling, "run", "--src-conn", "PG_SRC", "--src-stream", "public.t", "--tgt-conn", "LAKE"]
                peer("Sling", [
                    ("full refresh", base + ["--tgt-object", "main.full_t", "--mode", "full-refresh"],
                     "main.full_t", cat, args.rounds, None),
                    ("first incremental load", base + ["--tgt-object", "main.inc_t", "--mode", "incremental",
                                                       "--primary-key", "id", "--update-key", "updated"],
                     "main.inc_t", cat, 1, None),
                    ("1% incremental by key", base + ["--tgt-object", "main.inc_t", "--mode", "incremental",
                                                      "--primary-key", "id", "--update-key", "updated"],
                     "main.inc_t", cat, args.rounds, touch),
                ])
        for step in ["full refresh", "first incremental load", "1% incremental by key"]:
            ours = results.get(("Sluice", step))
            for (tool, s), med in results.items():
                if s == step and tool != "Sluice" and ours:
                    print(f"{step}: Sluice {med / ours:.2f}× the speed of {tool}", flush=True)
    finally:
        if sluice:
            stop(sluice)
        if pg:
            pg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
