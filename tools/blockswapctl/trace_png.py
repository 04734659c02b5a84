#!/usr/bin/env python3
"""Draws a blockswap trace (the Chrome trace-event JSON `blockswapctl trace`
writes) as a per-client timeline PNG: one row per client, its copies (the
daemon's copy spans for the client's rings), its stalls (red: the compute
stream sat idle at a wait, the time the trainer really lost) and, lighter, its
host waits (the thread blocked on a slot not filled yet, mostly while its own
queued compute drained) as bars; the x axis is the trace window, in ms from its
start, and the caption sums it up. A window without activity says so.

Usage: trace_png.py TRACE.json OUT.png
Exit 0 on success, 1 when matplotlib is missing or the input is not a trace,
2 on bad arguments. blockswapctl runs it for `trace --png` (installed as
share/blockswap/trace_png.py beside bin/blockswapctl).
"""
import json
import sys


def load_rows(document):
    """{client pid: {"name", "copies": [(start_ms, dur_ms)], "stalls": [...],
    "host_waits": [...]}}."""
    events = document["traceEvents"]
    daemon_pid = document.get("otherData", {}).get("daemon_pid")
    names = {}
    for event in events:
        if event.get("ph") == "M" and event.get("name") == "process_name":
            names[event["pid"]] = event["args"]["name"]
    spans = [e for e in events if e.get("ph") == "X"]
    # Times count from the window's start (a span begun before it starts
    # below 0, where the axis cuts it); a trace without one from its first span.
    since = document.get("otherData", {}).get("since_us") or 0
    if not since and spans:
        since = min(e["ts"] for e in spans)
    rows = {}

    def row(pid):
        return rows.setdefault(pid, {"name": names.get(pid, "pid %d" % pid),
                                     "copies": [], "stalls": [], "host_waits": []})

    for event in spans:
        start = (event["ts"] - since) / 1000.0
        length = max(event.get("dur", 0) / 1000.0, 0.0)
        if event.get("cat") == "copy" and event["pid"] == daemon_pid:
            pid = event.get("args", {}).get("client_pid")
            if pid:
                row(pid)["copies"].append((start, length))
        elif event.get("cat") == "stall":
            row(event["pid"])["stalls"].append((start, length))
        elif event.get("cat") == "host_wait":
            row(event["pid"])["host_waits"].append((start, length))
    for event in events:  # clients that neither copied nor stalled still get a row
        if event.get("ph") == "M" and event.get("name") == "process_name" and \
                event["pid"] != daemon_pid:
            row(event["pid"])
    return rows


def window_ms(document):
    """The trace window's length in ms (otherData's since_us..until_us), or None."""
    other = document.get("otherData", {})
    since, until = other.get("since_us"), other.get("until_us")
    if since is None or until is None or until <= since:
        return None
    return (until - since) / 1000.0


def caption(rows, window):
    """One line of totals: the window, its clients, copies, stalls, host waits."""
    copies = sum(len(r["copies"]) for r in rows.values())
    copying = sum(d for r in rows.values() for _, d in r["copies"])
    stalled = sum(d for r in rows.values() for _, d in r["stalls"])
    waited = sum(d for r in rows.values() for _, d in r["host_waits"])
    length = "window %.1f ms" % window if window is not None else "window of unknown length"
    return ("%s: %d clients, %d copies (%.1f ms copying), %.1f ms stalled, %.1f ms host wait"
            % (length, len(rows), copies, copying, stalled, waited))


def main(argv):
    if len(argv) != 3:
        print("usage: trace_png.py TRACE.json OUT.png", file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        print("trace_png.py: drawing the PNG needs matplotlib in %s (%s); on Debian: "
              "apt-get install python3-matplotlib (deploy/install-deps.sh installs it)"
              % (sys.executable, error), file=sys.stderr)
        return 1
    try:
        with open(argv[1]) as f:
            document = json.load(f)
        rows = load_rows(document)
        window = window_ms(document)
    except (OSError, ValueError, KeyError, TypeError) as error:
        print("trace_png.py: %s is not a blockswap trace: %s" % (argv[1], error),
              file=sys.stderr)
        return 1

    pids = sorted(rows)
    height = max(2.0, 0.9 * len(pids) + 1.4)
    figure, axes = plt.subplots(figsize=(12, height))
    for index, pid in enumerate(pids):
        y = len(pids) - 1 - index
        data = rows[pid]
        # Thin bars of 0 ms would vanish: give every bar at least a hair.
        copies = [(s, max(d, 0.02)) for s, d in data["copies"]]
        stalls = [(s, max(d, 0.02)) for s, d in data["stalls"]]
        host_waits = [(s, max(d, 0.02)) for s, d in data["host_waits"]]
        axes.broken_barh(copies, (y + 0.05, 0.4), facecolors="tab:blue")
        # The host waits first and thin, so that a stall drawn over one shows.
        axes.broken_barh(host_waits, (y - 0.3, 0.1), facecolors="lightgray")
        axes.broken_barh(stalls, (y - 0.45, 0.4), facecolors="tab:red")
    axes.set_yticks(range(len(pids)))
    axes.set_yticklabels(["%s\n%d copies, %.1f ms stalled" % (
        rows[p]["name"], len(rows[p]["copies"]), sum(d for _, d in rows[p]["stalls"]))
                          for p in reversed(pids)])
    axes.set_ylim(-0.6, max(len(pids), 1) - 0.4)
    if window is not None:
        axes.set_xlim(0, window)
    if not pids:
        axes.text(0.5, 0.5, "no activity in the window", transform=axes.transAxes,
                  ha="center", va="center", fontsize=14)
    axes.set_xlabel("ms since the trace window started\n" + caption(rows, window))
    axes.set_title("blockswap trace per client: copies (blue, upper bar), compute-stream stalls "
                   "(red, lower bar), host waits (grey line)")
    axes.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    try:
        figure.savefig(argv[2], dpi=100)
    except OSError as error:
        print("trace_png.py: cannot write %s: %s" % (argv[2], error), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
