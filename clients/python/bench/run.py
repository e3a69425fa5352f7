"""The middleware's cost in a FastAPI app, beside slowapi in memory, in one run.

    clients/python/bench/run [--seconds 10] [--rounds 2] [--connections 1,64]

Starts the Floodgate server (``--floodgate-bin``, default ``target/release/floodgate``) on the
memory store, and the app of ``apps.py`` three times under uvicorn (one process each, uvloop and
httptools): no limiter, slowapi in memory, Floodgate's ``RateLimitMiddleware``. wrk drives
``GET /hello`` of each in turn — at each connection count, for ``--seconds``, the variants in
alternating order from round to round, after a 1 s warm-up — and reports requests per second and
the p50 and p99 latency (wrk's, in microseconds), and the CPU time the app's process (and the
Floodgate server's) used per request, read from /proc — a figure a loaded machine disturbs less
than latency; what a limiter adds is its figure less the
no-limiter figure of the same round. The Floodgate client's deadline is ``--deadline`` (1 s by
default, as the TypeScript benchmark's: what is measured is checking, not the fail mode), and the
run reports how many of its decisions the fail mode made. Everything runs on this machine: the load generator, the
apps and the server share its cores. Prints a Markdown table, and writes every figure as JSON
with ``--json PATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from importlib import metadata
from pathlib import Path
from statistics import mean, median
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
VARIANTS = ("none", "slowapi", "floodgate")
POLICY = """
store: { kind: memory }
headers: both
rules:
  # Far above the load, keyed as slowapi's limit is: every request allowed, so what is measured is
  # what checking costs.
  - name: per-ip
    key: [ip]
    algorithm: fixed_window
    limit: 100000000
    window: 60s
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_ok(url: str, process: subprocess.Popen[bytes], what: str) -> None:
    until = time.monotonic() + 30
    while time.monotonic() < until:
        if process.poll() is not None:
            raise SystemExit(f"{what} exited with {process.returncode} at start")
        try:
            with urllib.request.urlopen(url, timeout=1) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"{what} did not answer {url} in 30 s")


def wrk(url: str, connections: int, seconds: float) -> dict[str, Any]:
    command = [
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{seconds:g}s",
        "--timeout",
        "5s",
        "-s",
        str(HERE / "report.lua"),
        url,
    ]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    line = next(line for line in out.splitlines() if line.startswith("{"))
    figures: dict[str, Any] = json.loads(line)
    figures["rps"] = figures["requests"] / (figures["duration_us"] / 1e6)
    return figures


def cpu_seconds(pid: int) -> float:
    """The CPU time a process used so far (user and system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connections", default="1,64")
    parser.add_argument("--floodgate-bin", default=str(REPO / "target" / "release" / "floodgate"))
    parser.add_argument(
        "--deadline",
        type=float,
        default=1.0,
        help="the Floodgate client's deadline, seconds (default 1: at 64 connections the app's own event "
        "loop queues a check past 50 ms, and the fail mode would decide instead of the server)",
    )
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    connections = [int(c) for c in args.connections.split(",")]
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install -y wrk)")
    if not Path(args.floodgate_bin).is_file():
        raise SystemExit(f"{args.floodgate_bin} is missing: cargo build --release -p floodgate-server --bin floodgate")

    work = Path(tempfile.mkdtemp(prefix="floodgate-pybench-"))
    (work / "floodgate.yaml").write_text(POLICY)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        port = free_port()
        server = subprocess.Popen(
            [
                args.floodgate_bin,
                "serve",
                "--config",
                str(work / "floodgate.yaml"),
                "--http",
                f"127.0.0.1:{port}",
                "--grpc",
                f"127.0.0.1:{free_port()}",
                "--no-watch",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(work / "floodgate.log", "wb"),  # noqa: SIM115 - the process keeps it
            env={**os.environ, "RUST_LOG": "warn"},
        )
        processes.append(server)
        floodgate_url = f"http://127.0.0.1:{port}"
        wait_ok(f"{floodgate_url}/healthz", server, "floodgate")

        urls: dict[str, str] = {}
        pids: dict[str, int] = {}
        for variant in VARIANTS:
            app_port = free_port()
            app = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "apps:app",
                    "--app-dir",
                    str(HERE),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(app_port),
                    "--log-level",
                    "warning",
                    "--no-access-log",
                ],
                env={
                    **os.environ,
                    "FLOODGATE_BENCH_VARIANT": variant,
                    "FLOODGATE_URL": floodgate_url,
                    "FLOODGATE_BENCH_DEADLINE": str(args.deadline),
                },
            )
            processes.append(app)
            pids[variant] = app.pid
            urls[variant] = f"http://127.0.0.1:{app_port}"
            wait_ok(f"{urls[variant]}/hello", app, f"the {variant} app")

        load_before = load()
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        for variant in VARIANTS:
            wrk(f"{urls[variant]}/hello", 1, 1)  # warm-up
        runs: list[dict[str, Any]] = []
        for round_number in range(args.rounds):
            order = VARIANTS if round_number % 2 == 0 else tuple(reversed(VARIANTS))
            for conns in connections:
                for variant in order:
                    app_cpu, server_cpu = cpu_seconds(pids[variant]), cpu_seconds(server.pid)
                    figures = wrk(f"{urls[variant]}/hello", conns, args.seconds)
                    figures["app_cpu_us"] = (cpu_seconds(pids[variant]) - app_cpu) / figures["requests"] * 1e6
                    figures["server_cpu_us"] = (cpu_seconds(server.pid) - server_cpu) / figures["requests"] * 1e6
                    figures.update(round=round_number, connections=conns, variant=variant)
                    runs.append(figures)
                    print(
                        f"round {round_number} c={conns:<3} {variant:<10} {figures['rps']:8.0f} req/s "
                        f"p50 {figures['p50_us']:6d} us p99 {figures['p99_us']:6d} us "
                        f"app CPU {figures['app_cpu_us']:5.0f} us/req "
                        f"server CPU {figures['server_cpu_us']:4.0f} us/req "
                        f"errors {figures['errors']} non-2xx {figures['non2xx']}",
                        file=sys.stderr,
                    )
        with urllib.request.urlopen(f"{urls['floodgate']}/stats", timeout=5) as answer:
            client_stats = json.load(answer)
        report(args, runs, client_stats, started, load_before, load())
        if args.json_path:
            Path(args.json_path).write_text(json.dumps({"runs": runs, "floodgate_client": client_stats}, indent=2))
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait()
        shutil.rmtree(work, ignore_errors=True)


def report(
    args: argparse.Namespace,
    runs: list[dict[str, Any]],
    client_stats: dict[str, Any],
    started: str,
    load_before: str,
    load_after: str,
) -> None:
    versions = ", ".join(
        f"{name} {metadata.version(name)}"
        for name in ("fastapi", "starlette", "uvicorn", "uvloop", "httptools", "slowapi", "limits", "httpx")
    )
    print(f"\nStarted {started}; Python {platform.python_version()}; {versions}; {os.cpu_count()} cores")
    print(f"Load average (1, 5, 15 min) before: {load_before}; after: {load_after}")
    print(
        f"Floodgate client (deadline {args.deadline:g} s): {client_stats['calls']} calls, "
        f"failed open {client_stats['failed_open']}, failures {client_stats['failures']}"
    )
    for conns in sorted({r["connections"] for r in runs}):
        print(
            f"\n{conns} connection(s), {args.seconds:g} s per round, {args.rounds} rounds "
            "(req/s, p50, p99 and CPU: means; added: medians of the rounds):\n"
        )
        print(
            "| variant | req/s | p50 | p99 | p50 added | p99 added | app CPU / request | "
            "Floodgate server CPU / request | req/s by round | p99 added by round |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
        base = {r["round"]: r for r in runs if r["connections"] == conns and r["variant"] == "none"}
        for variant in VARIANTS:
            mine = [r for r in runs if r["connections"] == conns and r["variant"] == variant]
            rps = mean(r["rps"] for r in mine)
            p50 = mean(r["p50_us"] for r in mine) / 1000
            p99 = mean(r["p99_us"] for r in mine) / 1000
            # What a limiter adds: its figure less the no-limiter figure of the same round, the median
            # of the rounds (one round the shared machine stalled does not make the figure).
            added50 = median(r["p50_us"] - base[r["round"]]["p50_us"] for r in mine) / 1000
            tails = [(r["p99_us"] - base[r["round"]]["p99_us"]) / 1000 for r in mine]
            added99 = median(tails)
            by_round = " → ".join(f"{r['rps']:.0f}" for r in mine)
            app_cpu = mean(r["app_cpu_us"] for r in mine)
            server_cpu = mean(r["server_cpu_us"] for r in mine)
            server = "—" if variant != "floodgate" else f"{server_cpu:.0f} µs"
            added = "—" if variant == "none" else f"{added50:.3f} ms"
            added_tail = "—" if variant == "none" else f"{added99:.3f} ms"
            tails_by_round = "—" if variant == "none" else " / ".join(f"{t:.2f}" for t in tails)
            print(
                f"| {variant} | {rps:,.0f} | {p50:.3f} ms | {p99:.3f} ms | {added} | {added_tail} | "
                f"{app_cpu:.0f} µs | {server} | {by_round} | {tails_by_round} |"
            )


if __name__ == "__main__":
    main()
