#!/usr/bin/env python3
"""What more than one writing backend could give a full refresh: issue 32's
lever for item 3, measured before it is built.

In one throwaway PostgreSQL cluster (the one `service.py` makes: deployment
settings, two databases), the `events` table of `service.py`, then per
round, each after a CHECKPOINT:
  - pipe: the raw binary COPY pipe into an empty table with its key (the
    service benchmark's baseline);
  - parts=1: the same pipe into a fresh table without a key, then
    `ADD PRIMARY KEY` (what Sluice's full refresh does, in psql);
  - parts=N: N such pipes at once, each copying one key range into the
    same fresh table, then `ADD PRIMARY KEY`.
Each is printed with its ratio to the pipe (above 1 is faster).

    benches/parallel_pipes.py                    # 1,000,000 rows, 3 rounds, 1-3 parts
    benches/parallel_pipes.py --rows 10000000 --rounds 1
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import service  # noqa: E402  (the cluster and the table shapes)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parts", type=int, default=3, help="up to this many pipes at once")
    ap.add_argument("--shape", choices=["current", "events"], default="events")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sluice-parallel-")
    pg = service.Cluster(work)
    try:
        shape = service.SHAPES[args.shape]
        src, dst = pg.bench_table(shape, args.rows, True)
        cols = pg.psql("SELECT string_agg(column_name, ',' ORDER BY ordinal_position) "
                       "FROM information_schema.columns WHERE table_name = 't'", db=src)
        keyless = shape["create"].replace(" PRIMARY KEY", "")
        url = lambda db: f"-h 127.0.0.1 -p {pg.port} -U postgres -d {db}"  # noqa: E731

        def pipe(where, target):
            return (f"psql -X -q {url(src)} -c \"COPY (SELECT {cols} FROM t {where}) TO STDOUT (FORMAT binary)\" | "
                    f"psql -X -q {url(dst)} -c \"COPY {target} FROM STDIN (FORMAT binary)\"")

        def quiet():
            pg.psql("CHECKPOINT", db=src)
            pg.psql("CHECKPOINT", db=dst)
            service.wait_quiet()

        print(f"{args.shape} table, {args.rows:,} rows, source and destination two databases of one cluster "
              f"(port {pg.port}); seconds, and × the pipe", flush=True)
        for _ in range(args.rounds):
            pg.psql("DROP TABLE IF EXISTS public.pipe; " + shape["create"].replace("CREATE TABLE t", "CREATE TABLE pipe"),
                    db=dst)
            quiet()
            t = time.monotonic()
            subprocess.run(pipe("", "pipe"), shell=True, check=True)
            base = time.monotonic() - t
            line = [f"pipe {base:6.2f}"]
            for n in range(1, args.parts + 1):
                table = f"p{n}"
                pg.psql(f"DROP TABLE IF EXISTS {table}; " + keyless.replace("CREATE TABLE t", f"CREATE TABLE {table}"),
                        db=dst)
                quiet()
                t = time.monotonic()
                step = args.rows // n + 1
                parts = [subprocess.Popen(pipe(f"WHERE id >= {i * step} AND id < {(i + 1) * step}" if n > 1 else "",
                                               table), shell=True) for i in range(n)]
                if any(p.wait() != 0 for p in parts):
                    sys.exit("a pipe failed")
                pg.psql(f"ALTER TABLE {table} ADD PRIMARY KEY (id)", db=dst)
                took = time.monotonic() - t
                copied = pg.psql(f"SELECT count(*) FROM {table}", db=dst)
                if int(copied) != args.rows:
                    sys.exit(f"parts={n} copied {copied} rows of {args.rows}")
                line.append(f"parts={n} {took:6.2f} ({base / took:.2f}×)")
            print(" | ".join(line), flush=True)
    finally:
        pg.stop()


if __name__ == "__main__":
    main()
