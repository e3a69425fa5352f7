#!/usr/bin/env python3
"""One measured run of the service section (bench/service/run): runs the load generator, and
writes its report with what the machine did meanwhile.

    measure.py --out FILE --client wrk|rls_bench --server PID [--redis PID] [--metrics URL]
               [--set KEY=VALUE]... -- COMMAND...

`--client wrk`: COMMAND is wrk with bench/service/wrk.lua, which writes its JSON report to
$WRK_JSON (set here). `--client rls_bench`: COMMAND is Floodgate's rls_bench example, whose text
summary is read into the same fields (OK is allowed, OVER_LIMIT denied, errors `grpc`).

Added to the report:
- `cpu`: CPU seconds over the run of the server (its process and children: nginx's workers), the
  load generator, Redis, and the rest of the machine (`other_s`: other processes such as another
  build, kernel threads; `top_others` names the busiest that were still running at the end;
  `steal_s` is time the hypervisor gave to other guests); `server_us_per_decision` and
  `client_us_per_decision`.
- `loadavg_before`: /proc/loadavg when the run started.
- `server_metrics`: with `--metrics` (a Prometheus endpoint), the increase over the run of
  Floodgate's `floodgate_decisions_total` by result (`error_allowed` = passed by fail-open on a
  store error), `floodgate_store_errors_total`, the mean of `floodgate_decision_duration_seconds`;
  or limitador's `authorized_calls`, `limited_calls`, `datastore_partitioned`.
- every `--set KEY=VALUE` (numbers kept as numbers).
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request

TICK = os.sysconf("SC_CLK_TCK")


def processes():
    """{pid: (ppid, CPU seconds, name)} of every process."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
            name = text[text.index("(") + 1:text.rindex(")")]
            fields = text.rsplit(")", 1)[1].split()
            # after the name: state, ppid, ..., utime (the 14th field of the line), stime (15th)
            found[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK, name)
        except (OSError, IndexError, ValueError):
            pass
    return found


def tree(procs, pid):
    """`pid` and its descendants (nginx's workers)."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p in procs and p not in out:
            out.add(p)
            todo += [c for c, (ppid, _, _) in procs.items() if ppid == p]
    return out


def machine():
    """(busy, steal) CPU seconds of the whole machine, every core."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is inside user)
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / TICK, v[7] / TICK


def scrape(url):
    """{series{labels}: value} of a Prometheus text endpoint ({} when it does not answer)."""
    try:
        text = urllib.request.urlopen(url, timeout=2).read().decode()
    except OSError:
        return {}
    series = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^(\S+?)(\{.*\})?\s+(\S+)$", line)
        if m:
            try:
                series[m.group(1) + (m.group(2) or "")] = float(m.group(3))
            except ValueError:
                pass
    return series


def metrics_delta(before, after):
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    out = {}
    if any(k.startswith("floodgate_") for k in after):
        results = {}
        for k, v in d.items():
            m = re.match(r'floodgate_decisions_total\{.*result="([^"]+)"', k)
            if m:
                results[m.group(1)] = results.get(m.group(1), 0) + round(v)
        out["decisions_by_result"] = results
        out["store_errors"] = round(sum(v for k, v in d.items() if k.startswith("floodgate_store_errors_total")))
        n = d.get("floodgate_decision_duration_seconds_count", 0.0)
        if n > 0:
            out["decision_mean_us"] = d.get("floodgate_decision_duration_seconds_sum", 0.0) / n * 1e6
    else:
        for name in ["authorized_calls", "limited_calls", "authorized_hits"]:
            vals = [v for k, v in d.items() if k == name or k.startswith(name + "{")]
            if vals:
                out[name] = round(sum(vals))
        if "datastore_partitioned" in after:
            out["datastore_partitioned_at_end"] = after["datastore_partitioned"]
    return out


def parse_rls_bench(text):
    """rls_bench's summary: requests N (R/s): OK a, OVER_LIMIT b, errors c; p50 ... ms; max ... ms."""
    m = re.search(r"(\d+) callers over (\d+) HTTP/2 connections, ([\d.]+) s", text)
    r = re.search(r"requests (\d+) \(([\d.]+)/s\): OK (\d+), OVER_LIMIT (\d+), errors (\d+)", text)
    if not (m and r):
        raise ValueError("not an rls_bench summary:\n" + text)
    total, per_sec, ok, over, errors = int(r[1]), float(r[2]), int(r[3]), int(r[4]), int(r[5])
    wall = total / per_sec if per_sec else float(m[3])
    q = {name: float(v) * 1000 for name, v in re.findall(r"^(p[\d.]+|max)\s+([\d.]+) ms", text, re.M)}
    return {
        "scenario": "throughput",
        "client": "rls_bench",
        "mode": "closed",
        "concurrency": int(m[1]),
        "grpc_connections": int(m[2]),
        "duration_s": wall,
        "sent": total,
        "decisions_per_sec": (ok + over) / wall if wall else 0.0,
        "allowed": ok,
        "denied": over,
        "errors": {"total": errors, "by_kind": {"grpc": errors} if errors else {}},
        "p50_us": q.get("p50"),
        "p90_us": q.get("p90"),
        "p99_us": q.get("p99"),
        "p999_us": q.get("p99.9"),
        "max_us": q.get("max"),
    }


def value(text):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--client", choices=["wrk", "rls_bench"], required=True)
    ap.add_argument("--server", type=int, required=True)
    ap.add_argument("--redis", type=int)
    ap.add_argument("--metrics")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command

    env = dict(os.environ)
    wrk_json = None
    if a.client == "wrk":
        fd, wrk_json = tempfile.mkstemp(suffix=".json", dir=os.path.dirname(os.path.abspath(a.out)))
        os.close(fd)
        env["WRK_JSON"] = wrk_json

    with open("/proc/loadavg") as f:
        loadavg = " ".join(f.read().split()[:3])
    m0 = scrape(a.metrics) if a.metrics else {}
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    procs0 = processes()
    (busy0, steal0), t0 = machine(), time.monotonic()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    (busy1, steal1), wall = machine(), time.monotonic() - t0
    procs1 = processes()
    children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    m1 = scrape(a.metrics) if a.metrics else {}

    def used(pids):
        return sum(procs1[q][1] - (procs0[q][1] if q in procs0 else 0.0) for q in pids if q in procs1)

    server_pids = tree(procs1, a.server)
    redis_pids = tree(procs1, a.redis) if a.redis else set()
    server, redis = used(server_pids), used(redis_pids)
    others = sorted(
        ((procs1[q][1] - (procs0[q][1] if q in procs0 else 0.0), f"{procs1[q][2]} ({q})")
         for q in procs1 if q not in server_pids and q not in redis_pids and q != os.getpid()),
        reverse=True,
    )
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        sys.exit(f"measure.py: {cmd[0]} exited with {p.returncode}")
    if a.client == "wrk":
        with open(wrk_json) as f:
            report = json.load(f)
        os.unlink(wrk_json)
    else:
        report = parse_rls_bench(p.stdout)

    client = (children1.ru_utime - children0.ru_utime) + (children1.ru_stime - children0.ru_stime)
    busy = busy1 - busy0
    decisions = report["allowed"] + report["denied"]
    report["cpu"] = {
        "wall_s": wall,
        "cores": os.cpu_count(),
        "server_s": server,
        "client_s": client,
        "redis_s": redis,
        "machine_busy_s": busy,
        "other_s": max(0.0, busy - server - client - redis),
        "steal_s": steal1 - steal0,
        "top_others": [f"{name} {cpu:.2f} s" for cpu, name in others[:3] if cpu >= 0.05],
        "server_us_per_decision": server / decisions * 1e6 if decisions else None,
        "client_us_per_decision": client / decisions * 1e6 if decisions else None,
    }
    report["loadavg_before"] = loadavg
    if a.metrics:
        report["server_metrics"] = metrics_delta(m0, m1)
    for kv in a.set:
        k, _, v = kv.partition("=")
        report[k] = value(v)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
