#!/usr/bin/env python3
"""PostgreSQL → Parquet files, the way users run each tool: issue 49's
benchmark. A throwaway PostgreSQL cluster (as `service.py` makes it) holds
the service benchmark's `current` table of 1,000,000 rows; `sluice serve`
on its embedded store copies it through the API into a `file` connection of
`format: parquet` (default settings: zstd, files cut at 128 MB), and, with
`--s3`, into an `s3` connection on a `moto_server` bucket. The peers run on
the same table in the same run, each with its defaults but for the Parquet
output, when installed (their own venv: `PEERS=/path/to/venv/bin`):

- dlt: `sql_table` source (its default sqlalchemy backend) into the
  `filesystem` destination, `loader_file_format="parquet"`;
- Sling: `sling run --tgt-object file://…/t.parquet`. Sling writes Parquet
  through a DuckDB CLI it downloads from GitHub at run time; offline, hand
  it one: `DUCKDB_PATH` (PyPI's `duckdb-cli`) and `SLING_HOME`, a home
  folder whose `.duckdb/extensions/v1.5.5/linux_amd64/` holds the json,
  parquet and httpfs extensions (from their PyPI wheels);
- ingestr: `ingestr ingest --dest-uri file://…` (it says when it has no
  local Parquet target, and is then not measured).

Every output is read back by DuckDB (count, distinct ids, sum(a)) and must
equal the source. Each figure is the median of `--rounds` runs; peak RSS is
the process's `VmHWM` (Sluice: since a reset before its runs; the peers:
`/usr/bin/time`'s maximum resident set).

    cargo build --release
    PEERS=/tmp/peers/bin benches/lake.py [--rows N] [--rounds N] [--s3]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from service import SHAPES, Cluster, sling_binary  # noqa: E402
from sluicebench import BIN, ROOT, free_port, peak_rss, reset_peak_rss, serve, stop, wait_quiet  # noqa: E402

LAKE_PYTHON = os.environ.get("LAKE_PYTHON", os.path.join(ROOT, ".ci", "venv", "bin", "python3"))


def duckdb_sums(glob_, s3=None):
    """count, distinct ids and sum(a) of the Parquet files `glob_` names."""
    script = """
import glob, json, os, sys, duckdb, duckdb_extension_httpfs
files, endpoint = sys.argv[1], sys.argv[2]
c = duckdb.connect(config={"allow_unsigned_extensions": True, "autoinstall_known_extensions": False,
    "autoload_known_extensions": False})
if endpoint:
    ext = glob.glob(os.path.join(os.path.dirname(duckdb_extension_httpfs.__file__), "extensions", "*",
        "httpfs.duckdb_extension"))[0]
    c.execute(f"LOAD '{ext}'")
    c.execute(f\"\"\"CREATE SECRET (TYPE s3, KEY_ID 'bench', SECRET 'bench-secret', REGION 'us-east-1',
        ENDPOINT '{endpoint.split('://')[1]}', URL_STYLE 'path', USE_SSL false)\"\"\")
print(json.dumps(c.execute(f"SELECT count(*), count(DISTINCT id), sum(a) FROM read_parquet('{files}')").fetchone()))
"""
    out = subprocess.run([LAKE_PYTHON, "-c", script, glob_, s3 or ""], check=True, capture_output=True, text=True)
    return tuple(json.loads(out.stdout))


def timed(argv, env):
    """Runs `argv` under /usr/bin/time: (seconds, peak RSS in MiB)."""
    start = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "%M", *argv], env=env, capture_output=True, text=True)
    secs = time.perf_counter() - start
    if r.returncode != 0:
        return None, (r.stdout + r.stderr).strip().splitlines()[-3:]
    return secs, int(r.stderr.strip().splitlines()[-1]) / 1024


DLT = """
import sys, dlt
from dlt.sources.sql_database import sql_table
src, out = sys.argv[1], sys.argv[2]
p = dlt.pipeline(pipeline_name="bench", destination=dlt.destinations.filesystem(bucket_url=out),
                 dataset_name="lake", pipelines_dir=out + "_state")
info = p.run(sql_table(credentials=src, table="t", schema="public"), write_disposition="replace",
             loader_file_format="parquet")
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--s3", action="store_true", help="also into a moto_server bucket")
    ap.add_argument("--no-peers", action="store_true")
    args = ap.parse_args()
    if not os.access(BIN, os.X_OK):
        sys.exit(f"no release binary at {BIN}: cargo build --release")
    work = tempfile.mkdtemp(prefix="sluice-lake-bench-")
    os.chmod(work, 0o755)
    pg = sluice = moto = None
    try:
        pg = Cluster(work)
        shape = SHAPES["current"]
        src_db, _ = pg.bench_table(shape, args.rows, False)
        want = tuple(int(x) for x in pg.psql("SELECT count(*), count(DISTINCT id), sum(a) FROM t", db=src_db).split("|"))
        width = pg.psql("SELECT round(avg(pg_column_size(t.*))) FROM t", db=src_db)
        print(f"current table: {args.rows:,} rows, average row {width} bytes; PostgreSQL {pg.bin.split('/')[-2]} "
              f"on port {pg.port}; {args.rounds} round(s) each", flush=True)
        results = []

        def record(name, times, rss, out_glob, s3=None):
            got = duckdb_sums(out_glob, s3)
            if got != want:
                # A peer that loses rows is reported, not timed.
                said = f"{name}: DuckDB reads {got[0]:,} rows ({got[1]:,} distinct ids), the source holds {want[0]:,}"
                if name.startswith("Sluice"):
                    sys.exit(said)
                print(f"{said}: rows lost, not counted", flush=True)
                return
            med = statistics.median(times)
            results.append((name, med, rss))
            print(f"{name}: median {med:.2f} s ({', '.join(f'{t:.2f}' for t in times)}), "
                  f"{args.rows / med:,.0f} rows/s, peak RSS {rss}; DuckDB reads {got[0]:,} rows, each once", flush=True)

        sluice, api = serve(work)
        org = api.call("POST", "/v1/organizations", {"name": "Lake bench"})["id"]
        conns = f"/v1/organizations/{org}/connections"
        src = api.call("POST", conns, {"name": "src", "type": "postgres", "capability": "source", "config": {
            "host": "127.0.0.1", "port": pg.port, "database": src_db, "user": "postgres", "schema": "public",
            "sslmode": "disable"}})["id"]
        targets = [("Sluice → local Parquet", {"type": "file", "config": {"path": "lake", "format": "parquet"}},
                    lambda: os.path.join(work, "files", org, "lake", "t", "*.parquet"), None)]
        if args.s3:
            port = free_port()
            moto = subprocess.Popen(["moto_server", "-H", "127.0.0.1", "-p", str(port)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            endpoint = f"http://127.0.0.1:{port}"
            time.sleep(3)
            subprocess.run(["curl", "-s", "-X", "PUT", f"{endpoint}/lake"], check=True, capture_output=True)
            targets.append(("Sluice → S3 (moto) Parquet", {"type": "s3", "config": {
                "bucket": "lake", "prefix": "bench", "endpoint_url": endpoint, "access_key_id": "bench",
                "secret_access_key": "bench-secret"}}, lambda: "s3://lake/bench/t/*.parquet", endpoint))
        for name, body, out_glob, s3 in targets:
            dst = api.call("POST", conns, dict(body, name=name[9:].replace(" ", "-"), capability="destination"))["id"]
            flow = api.call("POST", f"/v1/organizations/{org}/flows", {
                "name": f"to-{dst[-12:]}", "source_connection_id": src, "destination_connection_id": dst,
                "config": {"mappings": [{"source_entity": "t", "sync_mode": "full_refresh_overwrite"}]}})["id"]
            times = []
            reset_peak_rss(sluice)
            for _ in range(args.rounds):
                pg.psql("CHECKPOINT", db="postgres")
                wait_quiet()
                times.append(api.run(org, flow)[0])
            rss = int(peak_rss(sluice).split()[0]) / 1024
            record(name, times, f"{rss:.0f} MiB", out_glob(), s3)

        if not args.no_peers:
            peers = os.environ.get("PEERS", "")
            env = dict(os.environ, PATH=f"{peers}:{os.environ['PATH']}" if peers else os.environ["PATH"],
                       SLING_DISABLE_TELEMETRY="true", DLT_TELEMETRY_DISABLED="1", RUNTIME__DLTHUB_TELEMETRY="false",
                       PG_SRC=f"postgresql://postgres@127.0.0.1:{pg.port}/{src_db}?sslmode=disable")
            src_uri = env["PG_SRC"]
            sling_env = dict(env, HOME=os.environ.get("SLING_HOME", os.environ.get("HOME", "")))
            python = shutil.which("python3", path=peers) if peers else None
            runs = []
            if python and subprocess.run([python, "-c", "import dlt"], capture_output=True).returncode == 0:
                def dlt_run(i):
                    out = os.path.join(work, f"dlt{i}")
                    dlt_uri = src_uri.replace("postgresql://", "postgresql+psycopg2://")
                    return [python, "-c", DLT, dlt_uri, out], os.path.join(out, "lake", "t", "*.parquet")
                runs.append(("dlt → local Parquet (filesystem destination)", dlt_run))
            sling = sling_binary() or shutil.which("sling", path=peers or None)
            if sling:
                def sling_run(i):
                    out = os.path.join(work, f"sling{i}", "t.parquet")
                    return [sling, "run", "--src-conn", "PG_SRC", "--src-stream", "public.t",
                            "--tgt-object", f"file://{out}"], out
                runs.append(("Sling → local Parquet", sling_run))

                # With its defaults, Sling writes the table in parts, each
                # over the one file named (measured: 356,762 of 1,000,000
                # rows left, its log saying all were written); given a
                # file_max_rows, it writes the parts into a folder.
                def sling_parts(i):
                    out = os.path.join(work, f"slingparts{i}", "t.parquet")
                    return [sling, "run", "--src-conn", "PG_SRC", "--src-stream", "public.t",
                            "--tgt-object", f"file://{out}", "--tgt-options", '{"file_max_rows": 100000000}'], \
                        os.path.join(out, "*.parquet")
                runs.append(("Sling → local Parquet (file_max_rows set: a folder of parts)", sling_parts))
            ingestr = shutil.which("ingestr", path=peers or None)
            if ingestr:
                def ingestr_run(i):
                    out = os.path.join(work, f"ingestr{i}")
                    return [ingestr, "ingest", "--yes", "--source-uri", src_uri, "--source-table", "public.t",
                            "--dest-uri", f"file://{out}", "--dest-table", "lake.t", "--progress", "log"], \
                        os.path.join(out, "lake", "t", "*.parquet")
                runs.append(("ingestr → local Parquet", ingestr_run))
            for name, make in runs:
                times, rss = [], 0.0
                for i in range(args.rounds):
                    pg.psql("CHECKPOINT", db="postgres")
                    wait_quiet()
                    argv, out_glob = make(i)
                    secs, peak = timed(argv, sling_env if name.startswith("Sling") else env)
                    if secs is None:
                        print(f"{name}: failed, not measured: {' | '.join(peak)}", flush=True)
                        break
                    times.append(secs)
                    rss = max(rss, peak)
                else:
                    record(name, times, f"{rss:.0f} MiB", out_glob)
        local = [r for r in results if "local" in r[0]]
        sluice_local = next(r for r in local if r[0].startswith("Sluice"))
        for name, med, _ in local[1:]:
            print(f"Sluice's local Parquet load: {med / sluice_local[1]:.2f}× the speed of {name}")
    finally:
        if sluice:
            stop(sluice)
        if moto:
            moto.kill()
        if pg:
            pg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
