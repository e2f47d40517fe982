"""What the Python benchmarks share: the release binary's path, a small
client of the API, and waiting for a server to answer."""

import datetime
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("BIN", os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "sluice"))


def wait_healthy(base):
    """Waits up to 15 s for `base` to answer its health check."""
    for _ in range(300):
        try:
            urllib.request.urlopen(base + "/v1/health", timeout=1)
            return
        except Exception:
            time.sleep(0.05)
    sys.exit("the server did not start")


class Api:
    """The JSON API with a bearer token; a refused call ends the bench."""

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
        """Triggers the flow and waits for its run to end: (seconds from the
        call to the time the run's record says it finished, the run).

        The end is the server's own `finished_at` (same machine, same
        clock), so the client polls only every 50 ms: polling faster would
        take CPU from the run it measures on a small machine."""
        start = time.time()
        run = self.call("POST", f"/v1/organizations/{org}/flows/{flow}/run", {})
        while True:
            r = self.call("GET", f"/v1/organizations/{org}/runs/{run['id']}")
            if r["finished_at"]:
                secs = datetime.datetime.fromisoformat(r["finished_at"]).timestamp() - start
                if r["status"] != "succeeded":
                    sys.exit(f"a run did not succeed: {json.dumps(r)}")
                return secs, r
            time.sleep(0.05)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(work):
    """`sluice serve` on its embedded store, its data in `work/data` and its
    file root `work/files`, on a free port: (the process, an Api with a
    fresh user's token)."""
    port = free_port()
    env = dict(os.environ, SLUICE_LISTEN=f"127.0.0.1:{port}", SLUICE_DATA_DIR=os.path.join(work, "data"),
               SLUICE_FILE_ROOT=os.path.join(work, "files"),
               SLUICE_JWT_HS256_SECRET="service-bench-secret-service-bench-secret",
               SLUICE_MASTER_KEY="BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=", RUST_LOG="warn")
    env.pop("SLUICE_DATABASE_URL", None)
    log = open(os.path.join(work, "serve.log"), "w")
    sluice = subprocess.Popen([BIN, "serve"], env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    wait_healthy(base)
    token = subprocess.run([BIN, "token", "--email", "bench@example.com"], env=env, check=True,
                           capture_output=True, text=True).stdout.strip()
    return sluice, Api(base, token)


def cpu_times():
    """(idle, total) jiffies of the whole machine, from /proc/stat."""
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return fields[3] + fields[4], sum(fields)


def wait_quiet(limit=180, idle=0.9):
    """Waits until the machine is at least `idle` idle over a second (the
    work a step left behind, such as autovacuum after a large load, done),
    for at most `limit` seconds. Answers whether it got quiet: a step
    timed on a busy machine is flagged."""
    deadline = time.time() + limit
    while True:
        i0, t0 = cpu_times()
        time.sleep(1.0)
        i1, t1 = cpu_times()
        if t1 > t0 and (i1 - i0) / (t1 - t0) >= idle:
            return True
        if time.time() > deadline:
            return False


def peak_rss(proc):
    """The process's peak resident set (`VmHWM`), as /proc shows it."""
    return open(f"/proc/{proc.pid}/status").read().split("VmHWM:")[1].split("\n")[0].strip()


def reset_peak_rss(proc):
    """Resets the process's peak resident set to its current one (Linux's
    `clear_refs` 5), so that the next `peak_rss` is the peak since."""
    with open(f"/proc/{proc.pid}/clear_refs", "w") as f:
        f.write("5")


def stop(proc):
    """SIGTERM, then SIGKILL after 40 s (the grace of a run in progress)."""
    proc.terminate()
    try:
        proc.wait(timeout=40)
    except subprocess.TimeoutExpired:
        proc.kill()


TICK = os.sysconf("SC_CLK_TCK")


def _program(pid):
    """The program a process belongs to, by name: PostgreSQL, MariaDB,
    Sluice, Sling, ingestr, or other."""
    try:
        comm = open(f"/proc/{pid}/comm").read().strip()
        if comm in ("postgres", "postmaster"):
            return "PostgreSQL"
        if comm in ("mariadbd", "mysqld"):
            return "MariaDB"
        if comm.startswith("sluice"):
            return "Sluice"
        if comm.startswith("sling"):
            return "Sling"
        if "ingestr" in open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace"):
            return "ingestr"
    except OSError:
        pass
    return "other"


def _threads(programs):
    """{(pid, tid): (program, CPU ticks so far)} of every thread of the
    programs named (`programs` caches each process's program by pid)."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        if pid not in programs:
            programs[pid] = _program(pid)
        program = programs[pid]
        if program == "other":
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                stat = open(f"/proc/{pid}/task/{tid}/stat").read()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            ticks = int(fields[11]) + int(fields[12])  # utime + stime
            out[(pid, tid)] = (program, ticks)
    return out


class CpuMeter:
    """The CPU seconds each program's threads take during a step, read from
    /proc every `every` seconds (a thread that ends between two readings
    loses at most that much), and the busiest single thread's: with two
    cores, a step cannot end sooner than max(all / 2, busiest thread).
    The benchmark's own processes and anything else count as none."""

    def __init__(self, every=0.1):
        self.every, self.stop = every, threading.Event()

    def __enter__(self):
        self.programs = {}
        self.first = _threads(self.programs)
        self.last = dict(self.first)

        def sample():
            while not self.stop.wait(self.every):
                self.last.update(_threads(self.programs))

        self.worker = threading.Thread(target=sample, daemon=True)
        self.worker.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.worker.join()
        self.last.update(_threads(self.programs))
        self.by_program, self.busiest = {}, ("", 0.0)
        for key, (program, ticks) in self.last.items():
            secs = (ticks - self.first.get(key, (program, 0))[1]) / TICK
            if secs <= 0:
                continue
            self.by_program[program] = self.by_program.get(program, 0.0) + secs
            if secs > self.busiest[1]:
                self.busiest = (program, secs)
        return False

    def summary(self):
        """{'PostgreSQL': s, ..., 'all': s, 'busiest': (program, s)}."""
        return dict(self.by_program, all=sum(self.by_program.values()), busiest=self.busiest)
