#!/usr/bin/env python3
"""A real-looking nginx access log (combined + "$http_x_forwarded_for") of a small shop, for
`floodgate-bench replay`: the guide in docs/choosing-limits.md and the throughput figure in
BENCHMARKS.md.

Traffic, on a simulated day part starting 2026-12-02T09:00:00Z, deterministic for a --seed:
- shoppers, each with their own address: sessions of page views (each page pulls 4-12 static
  assets within a second and 1-3 API calls), think times of 2-40 s, sometimes a login and an
  order;
- an office NAT: --office shoppers behind one address;
- scrapers walking /api/products/{id} at ~4/s each;
- a credential stuffer posting /api/login at ~2/s from one address;
- every request through a load balancer (10.0.0.2-10.0.0.5), which nginx logs as the peer,
  the client being the last entry of X-Forwarded-For.

Usage: gen_log.py OUT [--minutes 30] [--shoppers 2000] [--office 40] [--scrapers 3] [--seed 1] [--gzip]
"""

import argparse
import zlib
import gzip
import heapq
import random

MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
AGENTS = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
    "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
]
STATIC = ["/static/app.js", "/static/app.css", "/static/vendor.js", "/static/logo.svg", "/static/fonts/inter.woff2"]
PAGES = ["/", "/products", "/products/%d", "/cart", "/search?q=%s"]
WORDS = ["shoes", "coat", "lamp", "desk", "chair", "mug", "socks", "scarf"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--shoppers", type=int, default=2000)
    p.add_argument("--office", type=int, default=40)
    p.add_argument("--scrapers", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--gzip", action="store_true")
    a = p.parse_args()
    rng = random.Random(a.seed)
    t0 = 1796202000.0  # 2026-12-02T09:00:00Z
    end = t0 + a.minutes * 60
    events = []  # (time, seq, client, method, path, status, agent)
    seq = 0

    def add(t, client, method, path, status, agent):
        nonlocal seq
        if t < end:
            seq += 1
            events.append((t, seq, client, method, path, status, agent))

    office = "198.51.100.77"
    for i in range(a.shoppers + a.office):
        client = office if i >= a.shoppers else "%d.%d.%d.%d" % (
            rng.choice([81, 92, 176, 203, 85, 62]), rng.randrange(256), rng.randrange(256), rng.randrange(1, 255))
        agent = rng.choice(AGENTS)
        t = t0 + rng.uniform(0, a.minutes * 60)
        pages = rng.randint(1, 25)
        logged_in = False
        for _ in range(pages):
            page = rng.choice(PAGES)
            if "%d" in page:
                page = page % rng.randint(1, 5000)
            elif "%s" in page:
                page = page % rng.choice(WORDS)
            add(t, client, "GET", page, 200, agent)
            for _ in range(rng.randint(4, 12)):
                add(t + rng.uniform(0.05, 0.9), client, "GET", rng.choice(STATIC), rng.choice([200, 304]), agent)
            for _ in range(rng.randint(1, 3)):
                add(t + rng.uniform(0.2, 1.2), client, "GET", "/api/products/%d" % rng.randint(1, 5000), 200, agent)
            if not logged_in and rng.random() < 0.08:
                logged_in = True
                add(t + rng.uniform(2, 6), client, "POST", "/api/login", 200, agent)
            if logged_in and rng.random() < 0.15:
                add(t + rng.uniform(1, 8), client, "POST", "/api/orders", 201, agent)
                add(t + rng.uniform(8, 10), client, "GET", "/api/orders/%d" % rng.randint(10000, 99999), 200, agent)
            t += min(rng.expovariate(1 / 12.0) + 2, 40)
    for s in range(a.scrapers):
        client = "45.134.%d.%d" % (rng.randrange(256), rng.randrange(1, 255))
        t = t0 + rng.uniform(0, a.minutes * 20)
        stop = t + rng.uniform(a.minutes * 10, a.minutes * 40)
        while t < min(stop, end):
            add(t, client, "GET", "/api/products/%d" % rng.randint(1, 5000), 200, "python-requests/2.32.3")
            t += rng.expovariate(4.0)
    t = t0 + a.minutes * 30
    while t < t0 + a.minutes * 45:
        add(t, "185.220.101.9", "POST", "/api/login", 401, "Go-http-client/1.1")
        t += rng.expovariate(2.0)

    # nginx logs a request when it ends: the log is in end order, so a slow request appears
    # after faster ones that started later. Times are whole seconds.
    events.sort(key=lambda e: e[0] + (0.4 if e[4].startswith("/api/orders") else 0.01))
    cache = {}
    opener = gzip.open if a.gzip else open
    with opener(a.out, "wt") as out:
        for t, _, client, method, path, status, agent in events:
            sec = int(t)
            when = cache.get(sec)
            if when is None:
                import time as _time
                g = _time.gmtime(sec)
                when = "%02d/%s/%d:%02d:%02d:%02d +0000" % (g.tm_mday, MONTHS[g.tm_mon - 1], g.tm_year, g.tm_hour, g.tm_min, g.tm_sec)
                cache = {sec: when}
            lb = "10.0.0.%d" % (2 + (zlib.crc32(client.encode()) & 3))
            size = 512 if not path.startswith("/static") else 18234
            out.write('%s - - [%s] "%s %s HTTP/1.1" %d %d "-" "%s" "%s"\n' % (lb, when, method, path, status, size, agent, client))


if __name__ == "__main__":
    main()
