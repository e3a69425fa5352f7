#!/usr/bin/env python3
"""The Markdown tables of a `bench/run-all` run, and their section of BENCHMARKS.md.

    bench/tables.py OUT_DIR                      # print the tables
    bench/tables.py OUT_DIR --write BENCHMARKS.md  # also replace the generated section

Throughput runs are repeated (`NAME.rK.json`, K = 1..RUNS, rounds interleaved across targets by
run-all); a table row is the run with the median decisions/s, shown with the spread of all runs.
Exactness runs (`instances`, real-time `boundary`) are repeated the same way and report the worst
run (the most admitted), since a limit is only as good as its worst case. The service section
(`bench/service/run`, `svc-*.rK.json`) also shows, for each pair it compares, the ratio of the two
runs of the same round: the median over rounds, the spread, and the target it is held to.
"""
import glob
import json
import os
import re
import sys

BEGIN = "<!-- bench/run-all: generated section, begin -->"
END = "<!-- bench/run-all: generated section, end -->"

out = sys.argv[1]


def runs(name):
    """Every run of `name`: NAME.json, or NAME.r1.json, NAME.r2.json, ..."""
    paths = sorted(glob.glob(os.path.join(out, glob.escape(name) + ".r*.json")))
    single = os.path.join(out, name + ".json")
    if os.path.exists(single):
        paths.append(single)
    found = []
    for p in paths:
        if not re.fullmatch(re.escape(name) + r"(\.r\d+)?\.json", os.path.basename(p)):
            continue
        try:
            found.append(json.load(open(p)))
        except (OSError, ValueError) as e:
            print(f"warning: {p}: {e}", file=sys.stderr)
    return found


def median(name):
    """The run with the median decisions/s, with `_spread` = (min, max, count) of all runs."""
    all_ = runs(name)
    if not all_:
        return None
    ordered = sorted(all_, key=lambda d: d["decisions_per_sec"])
    d = dict(ordered[(len(ordered) - 1) // 2])
    d["_spread"] = (ordered[0]["decisions_per_sec"], ordered[-1]["decisions_per_sec"], len(ordered))
    return d


def worst(name, field):
    """The run with the largest `field`, with `_runs` = how many runs and `_all` = every value."""
    all_ = runs(name)
    if not all_:
        return None
    d = dict(max(all_, key=lambda r: r[field]))
    d["_runs"] = len(all_)
    d["_all"] = [r[field] for r in all_]
    return d


def us(v):
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.1f} µs"


def rate(d):
    lo, hi, n = d["_spread"]
    spread = f" ({lo:,.0f}–{hi:,.0f}, {n} runs)" if n > 1 else ""
    return f"{d['decisions_per_sec']:,.0f}{spread}"


def loadof(d):
    if d.get("mode") == "closed":
        text = f"{d['concurrency']} callers"
    else:
        text = f"{d['rate']:.0f}/s open loop"
    if d.get("distribution") == "zipf":
        text += f", zipf over {d['keys']} keys"
    return text


def errors(d):
    e = d["errors"]
    kinds = e.get("by_kind") or {}
    if not e["total"]:
        return "0"
    return f"{e['total']} (" + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + ")" if kinds else str(e["total"])


THROUGHPUT_HEAD = (
    "| {first} | load | decisions/s: median (spread) | allowed | denied | errors | p50 | p90 | p99 | p99.9 | max |\n"
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def throughput_row(label, d):
    return (
        f"| {label} | {loadof(d)} | {rate(d)} | {d['allowed']:,} | {d['denied']:,} | {errors(d)} | "
        f"{us(d['p50_us'])} | {us(d['p90_us'])} | {us(d['p99_us'])} | {us(d['p999_us'])} | {us(d['max_us'])} |"
    )


def section(title, head, align, rows):
    """A titled table (no lines when it has no rows); `align` is the Markdown separator row."""
    if not rows:
        return []
    return ["", *([title, ""] if title else []), head, align, *rows]


def throughput_table(first, rows):
    lines = []
    for label, name in rows:
        d = median(name)
        if d:
            lines.append(throughput_row(label, d))
    if not lines:
        return []
    return ["", THROUGHPUT_HEAD.format(first=first), *lines]


def tables():
    t = []
    alone = throughput_table(
        "target",
        [
            ("HTTP `/v1/check`", "http-c64"),
            ("HTTP `/v1/check`", "http-c8"),
            ("gRPC `ShouldRateLimit`", "grpc-c64"),
            ("gRPC `ShouldRateLimit`", "grpc-c8"),
            ("HTTP `/v1/check`", "http-open20k"),
            ("engine in-process (memory)", "inproc-c2"),
            ("engine in-process (memory)", "inproc-zipf"),
        ],
    )
    if alone:
        t += ["#### Service and engine (Floodgate alone)", *alone]

    rows = []
    for a in ["fixed_window", "sliding_window", "sliding_log", "token_bucket", "gcra"]:
        for pattern, suffix in [("flood at the boundary", ""), ("burst, then steady at the rate", "-steady")]:
            d = worst("boundary-" + a + suffix, "max_admitted_in_any_window")
            if not d:
                continue
            rows.append(
                f"| {a} | {pattern} | {d['limit']} / {d['window_ms']:.0f} ms | {d['max_admitted_in_any_window']} | "
                f"{d['over_admission_ratio']:.2f} | {d.get('promised_at_most', '—')} |"
            )
    t += section(
        "#### Boundary bursts (simulated clock: exact)",
        "| algorithm | traffic | limit / window | max admitted in any window | over-admission ratio | promised at most |",
        "|---|---|---|---:|---:|---:|",
        rows,
    )

    rows = []
    for n, label in [("fairness", "30/min per user, 120/min per IP"), ("fairness-loose", "30/min per user, 600/min per IP")]:
        d = runs(n)
        if not d:
            continue
        d = d[0]
        rows.append(
            f"| {label} | {d['normal_users']} ({d['nat_users']}) | {d['bots']} | {d['false_rejection_rate'] * 100:.2f} % | "
            f"{d['nat_false_rejection_rate'] * 100:.2f} % | {d['users_with_a_rejection'] * 100:.1f} % | "
            f"{d['bot_rejection_rate'] * 100:.1f} % | {d['verdict']} |"
        )
    t += section(
        "#### Fairness (simulated clock, seeded)",
        "| policy | normal users (NAT) | bots | false-rejection rate | NAT users' false-rejection rate | users who saw a 429 | bot rejection rate | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
        rows,
    )

    rows = []
    for label, n in [
        ("Floodgate, memory store per instance", "instances-memory-{a}"),
        ("Floodgate, one shared Redis", "instances-redis-{a}"),
    ]:
        for a in ["sliding_log", "fixed_window", "token_bucket"]:
            d = worst(n.format(a=a), "admitted")
            if not d:
                continue
            rows.append(
                f"| {label} | {a} | {d['instances']} | {d['limit']} | {d['admitted']} ({', '.join(map(str, d['_all']))}) | "
                f"{d['over_admission']:.2f} | {d.get('passed_by_fail_open', 0)} |"
            )
    for label, n in [("limitador `AsyncRedisStorage`, one shared Redis", "instances-limitador-async"),
                     ("limitador `CachedRedisStorage`, one shared Redis", "instances-limitador-cached")]:
        d = worst(n, "admitted")
        if d:
            rows.append(
                f"| {label} | {d['algorithm']} | {d['instances']} | {d['limit']} | {d['admitted']} ({', '.join(map(str, d['_all']))}) | "
                f"{d['over_admission']:.2f} | — |"
            )
    t += section(
        "#### Instances: one key hammered through M instances (worst run shown; every run in brackets)",
        "| who | algorithm | instances | limit | admitted, worst (all runs) | over-admission | passed by fail-open |",
        "|---|---|---:|---:|---:|---:|---:|",
        rows,
    )

    rows = []
    for n in ["outage-pause-fail_open", "outage-kill-fail_closed", "outage-kill-fail_open", "outage-pause-fail_closed"]:
        d = runs(n)
        if not d:
            continue
        d = d[0]
        phases = d.get("phases") or {}
        for phase in ["before", "during", "after"]:
            p = phases.get(phase)
            if not p:
                continue
            rows.append(
                f"| {d.get('fault', '?')}, {d.get('on_store_error', '?')} | {phase} | {p['sent']:,} | {p['allowed']:,} | {p['denied']:,} | "
                f"{errors(p)} | {us(p['p50_us'])} | {us(p['p99_us'])} | {us(p['max_us'])} |"
            )
        rec = d.get("recovered_after_ms")
        rows.append(f"| {d.get('fault', '?')}, {d.get('on_store_error', '?')} | recovered after | "
                    f"{'never' if rec is None else f'{rec:.0f} ms'} |  |  |  |  |  |  |")
    t += section(
        "#### Outage: Redis paused or killed under load (`floodgate serve` on a Redis store)",
        "| fault, on_store_error | phase | sent | allowed | denied | errors | p50 | p99 | max |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        rows,
    )

    rows = []
    for d in runs("cross-slot")[:1]:
        for name in ["at_once", "denied_first", "co_located"]:
            o = d.get(name)
            if not o:
                continue
            gb = o["give_backs"]
            rows.append(
                f"| {name} | {o['sent']:,} | {o['normal_sent']:,} | {o['normal_admitted']:,} | {o['normal_refused']:,} | "
                f"{o['under_admitted_per_10k_requests']:.2f} | {o['tenant_remaining']:,} | {'yes' if o['exact'] else 'no'} | "
                f"{'yes' if o['never_over_admitted'] else 'no'} | {gb['started']:,} / {gb['retried']:,} / {gb['landed']:,} / {gb['lost']:,} | "
                f"{us(o['admitted_p50_us'])} / {us(o['admitted_p99_us'])} | {us(o['denied_p50_us'])} / {us(o['denied_p99_us'])} |"
            )
    t += section(
        "#### Redis Cluster across slots: under-admission per 10,000 (`cross-slot`, in process, 3 masters)",
        "| variant | sent | normal sent | normal admitted | normal refused | under-admitted /10k | tenant remaining | exact | never over-admitted | give-backs started / retried / landed / lost | admitted p50 / p99 | denied p50 / p99 |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|",
        rows,
    )

    # Peers.
    t += throughput_table(
        "POST /chat behind (mixed: 10/min per user)",
        [(f"{label}", f"{n}-{s}") for s in ["c64", "c8", "open"] for label, n in [
            ("@nestjs/throttler 6 (memory)", "route-nest"),
            ("Floodgate tower, fixed_window", "route-fg-fixed"),
            ("Floodgate tower, sliding_log", "route-fg-log"),
        ]],
    )
    t += throughput_table(
        "POST /chat behind (allowed path: a limit no run reaches)",
        [(label, f"{n}-c{c}") for c in [64, 8] for label, n in [
            ("@nestjs/throttler 6 (memory)", "route-nest-free"),
            ("Floodgate tower, sliding_log", "route-fg-free"),
        ]],
    )
    rows = []
    for variant, client in [("flood", "flood (2 × limit per burst)"), ("careful", "careful (primed, limit − 1 per burst)")]:
        for label, n in [("@nestjs/throttler 6 (memory)", "rb-nest"), ("Floodgate fixed_window", "rb-fg-fixed_window"),
                         ("Floodgate sliding_window", "rb-fg-sliding_window"), ("Floodgate sliding_log", "rb-fg-sliding_log")]:
            d = worst(f"{n}-{variant}", "max_admitted_in_any_window")
            if not d:
                continue
            rows.append(
                f"| {label} | {client} | {d['cycles']} × 2 × {d['burst']} at ±{d['offset_ms']:g} ms, 10 / 1 s | "
                f"{d['max_admitted_in_any_window']} ({', '.join(map(str, d['_all']))}) | {d['over_admission_ratio']:.2f} |"
            )
    t += section(None, "| POST /chat behind, real time | client | bursts | max admitted in any window, worst (all runs) | over-admission ratio |", "|---|---|---|---:|---:|", rows)
    t += throughput_table(
        "in-process library, 100/s per user, 10 000 keys",
        [
            ("Floodgate engine, fixed_window", "inproc-fixed-c2"),
            ("Floodgate engine, sliding_window", "inproc-sliding-c2"),
            ("limitador `RateLimiter` (memory)", "limitador-memory"),
        ],
    )
    t += throughput_table(
        "in-process library, allowed path (10⁹/s per user)",
        [
            ("Floodgate engine, fixed_window", "inproc-free-c2"),
            ("limitador `RateLimiter` (memory)", "limitador-memory-free"),
        ],
    )
    t += throughput_table(
        "library on one Redis, fixed window 100/s per user, 10 000 keys",
        [(label, f"{n}-c{c}") for c in [64, 256] for label, n in [
            ("Floodgate engine, `store: redis`", "redis-fg"),
            ("rate-limiter-flexible `RateLimiterRedis` (ioredis)", "redis-rlf"),
            ("limitador `AsyncRedisStorage`", "redis-limitador"),
        ]],
    )
    t += service_tables()
    t += latency_tables()
    return t


def latency_tables():
    """floodgate-bench latency: each system at each offered rate, open loop."""
    found = runs("latency")
    if not found:
        return []
    d = found[-1]
    out = ["#### Tail latency at equal offered load (open loop)"]
    for comparison, peer, peak in d["peak"]:
        what = "the gateway beside nginx, added over the upstream alone" if comparison == "gateway" else "the check API beside limitador-server"
        rows = []
        for p in d["points"]:
            if p["comparison"] != comparison:
                continue
            added = [us(p[k]) if p.get(k) is not None else "–" for k in ("added_p50_us", "added_p99_us", "added_p999_us")]
            cells = [p["system"], f"{p['fraction'] * 100:.0f} %", f"{p['offered_per_sec']:.0f}",
                     us(p["p50_us"]), us(p["p99_us"]), us(p["p999_us"]), *added, str(p["errors"])]
            rows.append("| " + " | ".join(cells) + " |")
        out += section(
            f"{what}; {peer} peaks at {peak:.0f}/s (closed loop, {d['connections']} callers):",
            "| system | load | offered/s | p50 | p99 | p99.9 | added p50 | added p99 | added p99.9 | errors |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
            rows,
        )
    return out


# Service section (bench/service/run): every run is NAME.rK.json with its `round`.
SERVICE_WORKLOADS = [
    ("memory", "one", "memory, 1 limit"),
    ("memory", "two", "memory, 2 limits"),
    ("redis", "one", "Redis, 1 limit"),
    ("redis", "two", "Redis, 2 limits"),
]
SERVICE_WHO = [
    ("fg", "Floodgate (`headers: both`, default)"),
    ("fgnone", "Floodgate (`headers: none`)"),
    ("lim", "limitador-server (default)"),
    ("fgbase", "Floodgate, the baseline build (`FLOODGATE_BASELINE`, `headers: both`)"),
]
SERVICE_API = {
    ("fg", "http"): "HTTP `POST /v1/check`",
    ("fgnone", "http"): "HTTP `POST /v1/check`",
    ("lim", "http"): "HTTP `POST /check_and_report`",
    ("fg", "grpc"): "gRPC `ShouldRateLimit`",
    ("fgnone", "grpc"): "gRPC `ShouldRateLimit`",
    ("lim", "grpc"): "gRPC `ShouldRateLimit`",
    ("fgbase", "http"): "HTTP `POST /v1/check`",
    ("fgbase", "grpc"): "gRPC `ShouldRateLimit`",
}
# Floodgate against the baseline build in the same rounds (`FLOODGATE_BASELINE=… bench/service/run`).
BASELINE_RATIOS = [
    ("HTTP decisions/s ÷ baseline", "svc-fg-http-{w}", "svc-fgbase-http-{w}", "decisions_per_sec"),
    ("HTTP p99 ÷ baseline", "svc-fg-http-{w}", "svc-fgbase-http-{w}", "p99_us"),
    ("gRPC decisions/s ÷ baseline", "svc-fg-grpc-{w}", "svc-fgbase-grpc-{w}", "decisions_per_sec"),
    ("gRPC p99 ÷ baseline", "svc-fg-grpc-{w}", "svc-fgbase-grpc-{w}", "p99_us"),
]
# (label, numerator, denominator, field, target, "ge" | "le"); {v} is fg or fgnone.
SERVICE_TARGETS = [
    ("HTTP ÷ nginx ceiling", "svc-{v}-http-{w}", "svc-nginx-http", "decisions_per_sec", 0.9, "ge"),
    ("HTTP ÷ limitador HTTP", "svc-{v}-http-{w}", "svc-lim-http-{w}", "decisions_per_sec", 1.5, "ge"),
    ("HTTP p99 ÷ limitador p99", "svc-{v}-http-{w}", "svc-lim-http-{w}", "p99_us", 0.5, "le"),
    ("gRPC ÷ limitador gRPC", "svc-{v}-grpc-{w}", "svc-lim-grpc-{w}", "decisions_per_sec", 1.5, "ge"),
    ("gRPC ÷ own HTTP", "svc-{v}-grpc-{w}", "svc-{v}-http-{w}", "decisions_per_sec", 0.8, "ge"),
    # Not a target: how close to a do-nothing tonic RLS server (the gRPC ceiling) with the same client.
    ("gRPC ÷ gRPC ceiling", "svc-{v}-grpc-{w}", "svc-ceiling-grpc", "decisions_per_sec", None, "ge"),
]


def by_round(name):
    return {d["round"]: d for d in runs(name) if "round" in d}


def service_errors(d):
    text = errors(d)
    m = d.get("server_metrics") or {}
    passed = (m.get("decisions_by_result") or {}).get("error_allowed", 0)
    if m.get("store_errors") or passed:
        text += f"; store errors {m.get('store_errors', 0):,}, {passed:,} rule decisions passed by fail-open"
    return text


def service_row(workload, who, api, d):
    cpu = d.get("cpu") or {}
    per = cpu.get("server_us_per_decision")
    other = other_share(d) * 100 if cpu.get("wall_s") else None
    return (
        f"| {workload} | {who} | {api} | {rate(d)} | {d['allowed']:,} | {d['denied']:,} | {service_errors(d)} | "
        f"{us(d['p50_us'])} | {us(d['p90_us'])} | {us(d['p99_us'])} | {us(d['p999_us'])} | {us(d['max_us'])} | "
        f"{'—' if per is None else f'{per:.1f} µs'} | {'—' if other is None else f'{other:.0f} %'} |"
    )


QUIET = 0.05  # a run is quiet when the rest of the machine used under 5 % of its CPU meanwhile


def other_share(d):
    cpu = d.get("cpu") or {}
    return cpu["other_s"] / (cpu["wall_s"] * cpu["cores"]) if cpu.get("wall_s") else 0.0


def mid(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def verdict(pairs, target, how):
    """`0.93 (0.88–0.97), met` or `…, missed by 0.12`, with the rounds that met it, then the median
    of the quiet rounds (both runs under QUIET) when some rounds were not."""
    values = sorted(v for v, _ in pairs)
    quiet = [v for v, q in pairs if q]
    n = len(values)
    m = mid(values)
    if target is None:
        spread = f" ({values[0]:.2f}–{values[-1]:.2f})" if n > 1 else ""
        return f"{m:.2f}{spread}" + (f"; quiet rounds {mid(quiet):.2f} ({len(quiet)})" if quiet and len(quiet) < n else "")
    ok = (lambda v: v >= target) if how == "ge" else (lambda v: v <= target)
    spread = f" ({values[0]:.2f}–{values[-1]:.2f})" if n > 1 else ""
    text = f"{m:.2f}{spread}, " + ("met" if ok(m) else f"missed by {abs(m - target):.2f}")
    if n > 1:
        text += f" ({sum(map(ok, values))}/{n} rounds)"
    if quiet and len(quiet) < n:
        text += f"; quiet rounds {mid(quiet):.2f} ({len(quiet)})"
    return text


def service_tables():
    t = []
    rows = []
    d = median("svc-nginx-http")
    if d:
        rows.append(service_row("HTTP/1.1 ceiling", "nginx `return 200` (50-byte body)", "HTTP `POST /v1/check`", d))
    d = median("svc-ceiling-grpc")
    if d:
        rows.append(service_row("gRPC ceiling", "tonic RLS answering `OK` (`rls_ceiling`)", "gRPC `ShouldRateLimit`", d))
    for store, limits, workload in SERVICE_WORKLOADS:
        for proto in ["http", "grpc"]:
            for v, who in SERVICE_WHO:
                d = median(f"svc-{v}-{proto}-{store}-{limits}")
                if d:
                    rows.append(service_row(workload, who, SERVICE_API[(v, proto)], d))
    if not rows:
        return t
    t += ["", "#### Service: Floodgate and limitador-server side by side, HTTP/1.1 and gRPC (`bench/service/run`)", ""]
    meta = os.path.join(out, "service-meta.txt")
    if os.path.exists(meta):
        t += [line.rstrip("\n") for line in open(meta) if line.strip()]
    loads = []
    for path in glob.glob(os.path.join(out, "svc-*.r*.json")):
        try:
            loads.append(float(json.load(open(path))["loadavg_before"].split()[0]))
        except (OSError, ValueError, KeyError, IndexError):
            pass
    if loads:
        loads.sort()
        t.append(f"Load average (1 min) at the start of the measured runs: {loads[0]:.2f}–{loads[-1]:.2f}, "
                 f"median {loads[len(loads) // 2]:.2f}; *other CPU* is the share of both cores used during a "
                 "run by anything but the server, its client and Redis (another build, kernel threads).")
    t += [
        "",
        "| workload | who | API | decisions/s: median (spread) | allowed | denied | errors | p50 | p90 | p99 | p99.9 | max | server CPU per decision | other CPU |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
    ]

    rows = []
    for store, limits, workload in SERVICE_WORKLOADS:
        w = f"{store}-{limits}"
        for v, who in SERVICE_WHO[:2]:
            cells = []
            for _, num, den, field, target, how in SERVICE_TARGETS:
                a, b = by_round(num.format(v=v, w=w)), by_round(den.format(v=v, w=w))
                pairs = [(a[r][field] / b[r][field], max(other_share(a[r]), other_share(b[r])) < QUIET)
                         for r in a if r in b and b[r][field]]
                cells.append(verdict(pairs, target, how) if pairs else "—")
            if any(c != "—" for c in cells):
                rows.append(f"| {workload} | {who} | " + " | ".join(cells) + " |")
    if rows:
        heads = " | ".join(label if target is None else f"{label} (target {'≥' if how == 'ge' else '≤'} {target:g})"
                           for label, _, _, _, target, how in SERVICE_TARGETS)
        t += [
            "",
            "Ratios of each round's runs: the median over rounds, the spread, how many rounds met the target; then, "
            f"when some rounds were not quiet, the median of the quiet ones (both runs with other CPU under {QUIET:.0%}) "
            "and how many there were.",
            "",
            f"| workload | Floodgate | {heads} |",
            "|---|---|" + "---:|" * len(SERVICE_TARGETS),
            *rows,
        ]

    rows = []
    for store, limits, workload in SERVICE_WORKLOADS:
        w = f"{store}-{limits}"
        cells = []
        for _, num, den, field in BASELINE_RATIOS:
            a, b = by_round(num.format(w=w)), by_round(den.format(w=w))
            pairs = [(a[r][field] / b[r][field], max(other_share(a[r]), other_share(b[r])) < QUIET)
                     for r in a if r in b and b[r][field]]
            cells.append(verdict(pairs, None, "ge") if pairs else "—")
        if any(c != "—" for c in cells):
            rows.append(f"| {workload} | " + " | ".join(cells) + " |")
    if rows:
        t += [
            "",
            "Floodgate (`headers: both`) against the baseline build, each ratio taken within a round, then the median "
            "over rounds and the spread:",
            "",
            "| workload | " + " | ".join(label for label, _, _, _ in BASELINE_RATIOS) + " |",
            "|---|" + "---:|" * len(BASELINE_RATIOS),
            *rows,
        ]
    return t


def header():
    meta = os.path.join(out, "meta.txt")
    lines = []
    if os.path.exists(meta):
        lines += [line.rstrip("\n") for line in open(meta) if line.strip()]
    versions = os.path.join(out, "versions.txt")
    if os.path.exists(versions):
        v = [line.strip() for line in open(versions) if line.strip()]
        if v:
            lines.append("Peer versions: " + "; ".join(v) + ".")
    return lines


def main():
    body = header() + [""] + tables()
    text = "\n".join(body).strip("\n") + "\n"
    print(text)
    if len(sys.argv) > 3 and sys.argv[2] == "--write":
        path = sys.argv[3]
        doc = open(path).read()
        if BEGIN not in doc or END not in doc:
            sys.exit(f"{path}: the markers {BEGIN!r} and {END!r} are missing; add them where the tables go")
        start = doc.index(BEGIN) + len(BEGIN)
        stop = doc.index(END)
        open(path, "w").write(doc[:start] + "\n" + text + doc[stop:])
        print(f"wrote the generated section of {path}", file=sys.stderr)


main()
