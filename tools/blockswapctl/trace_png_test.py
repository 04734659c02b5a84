#!/usr/bin/env python3
"""trace_png.py on hand-made traces: the x axis is the trace window, the caption
sums it up, and a window without activity is drawn and says so.

    trace_png_test.py TRACE_PNG_PY
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = None


def load_script():
    spec = importlib.util.spec_from_file_location("trace_png", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def trace(since_us, until_us, spans):
    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "blockswapd"}}]
    pids = {span["pid"] for span in spans if span["pid"] != 1}
    for pid in sorted(pids):
        events.append({"ph": "M", "name": "process_name", "pid": pid,
                       "args": {"name": "trainer (pid %d)" % pid}})
    return {"traceEvents": events + spans, "displayTimeUnit": "ms",
            "otherData": {"daemon_pid": 1, "since_us": since_us, "until_us": until_us}}


def copy(ts, dur, client):
    return {"ph": "X", "cat": "copy", "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": {"client_pid": client}}


def stall(ts, dur, pid):
    return {"ph": "X", "cat": "stall", "pid": pid, "tid": 2, "ts": ts, "dur": dur}


class TracePngTest(unittest.TestCase):
    def setUp(self):
        self.png = load_script()
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def draw(self, document):
        path = os.path.join(self.tmp.name, "t.json")
        with open(path, "w") as f:
            json.dump(document, f)
        out = os.path.join(self.tmp.name, "t.png")
        result = subprocess.run([sys.executable, SCRIPT, path, out], capture_output=True,
                                text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(out, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_times_count_from_the_window_start_and_the_axis_is_the_window(self):
        document = trace(1_000_000, 1_500_000, [copy(1_100_000, 300, 7), stall(1_100_400, 100, 7)])
        rows = self.png.load_rows(document)
        self.assertEqual(rows[7]["copies"], [(100.0, 0.3)])
        self.assertEqual(rows[7]["stalls"], [(100.4, 0.1)])
        self.assertEqual(self.png.window_ms(document), 500.0)
        self.draw(document)

    def test_caption_sums_the_window(self):
        document = trace(0 + 10, 2_010, [copy(100, 250, 7), copy(600, 250, 8), stall(900, 50, 8)])
        rows = self.png.load_rows(document)
        self.assertEqual(self.png.caption(rows, self.png.window_ms(document)),
                         "window 2.0 ms: 2 clients, 2 copies (0.5 ms copying), 0.1 ms stalled, "
                         "0.0 ms host wait")

    def test_an_idle_window_is_drawn_and_says_so(self):
        document = trace(1_000, 41_000, [])
        self.assertEqual(self.png.load_rows(document), {})
        self.assertEqual(self.png.caption({}, self.png.window_ms(document)),
                         "window 40.0 ms: 0 clients, 0 copies (0.0 ms copying), 0.0 ms stalled, "
                         "0.0 ms host wait")
        self.draw(document)


if __name__ == "__main__":
    SCRIPT = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
