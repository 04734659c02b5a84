#!/usr/bin/env python3
"""blockswapd as a service, end to end: the real binary with a fake systemd
notification socket, the config file and SIGHUP, the socket's group and mode,
the metrics endpoint and the drain on SIGTERM; `backend = "auto"` on machines
with and without a GPU it cannot drive.

    service_test.py BIN_DIR [--test-hooks]

--test-hooks: the binaries were built with test hooks
(shared/base/test_hooks.h), so that the fake machines below can be used.
"""
import grp
import os
import pty
import re
import select
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

BIN = None
TEST_HOOKS = False


class Daemon:
    """A blockswapd on a private socket and master directory, with stderr in
    a file and NOTIFY_SOCKET pointing at a datagram socket this test owns."""

    def __init__(self, tmp, args=(), config=None):
        self.tmp = tmp
        self.socket_path = os.path.join(tmp, "blockswapd.sock")
        self.shm = "/dev/shm/" + os.path.basename(tmp)
        self.notify_path = os.path.join(tmp, "notify")
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(self.notify_path)
        self.log_path = os.path.join(tmp, "daemon.log")
        command = [os.path.join(BIN, "blockswapd"), "--backend=host",
                   "--socket=" + self.socket_path, "--shm-prefix=" + self.shm]
        # Never the machine's /etc/blockswap/blockswapd.toml.
        command.append("--config=" + (config if config is not None else "/dev/null"))
        command += list(args)
        env = dict(os.environ, NOTIFY_SOCKET=self.notify_path)
        env.pop("JOURNAL_STREAM", None)
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=self.log, env=env)

    def messages(self, timeout=15.0, until=None):
        """Notification datagrams until one contains `until` (or the timeout)."""
        got = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.notify.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                got.append(self.notify.recv(4096).decode())
            except socket.timeout:
                break
            if until is not None and until in got[-1]:
                break
        return got

    def log_text(self):
        with open(self.log_path) as f:
            return f.read()

    def await_log(self, pattern, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.log_text())
            if match:
                return match
            time.sleep(0.02)
        return None

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=timeout)
        finally:
            self.close()

    def close(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.notify.close()
        self.log.close()
        subprocess.run(["rm", "-rf", self.shm])


def ctl(daemon, *args, timeout=30):
    return subprocess.run([os.path.join(BIN, "blockswapctl"), "--socket=" + daemon.socket_path]
                          + list(args), capture_output=True, text=True, timeout=timeout)


def metrics(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as reply:
        assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return reply.read().decode()


def sample(text, name):
    """The value of the sample line `name` (with its labels), or None."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split(" ")[-1])
    return None


class ServiceTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="blockswap-service-")
        self.daemons = []

    def tearDown(self):
        for daemon in self.daemons:
            daemon.close()
        subprocess.run(["rm", "-rf", self.tmp])

    def start(self, args=(), config=None):
        daemon = Daemon(self.tmp, args, config)
        self.daemons.append(daemon)
        return daemon

    def write_config(self, text):
        path = os.path.join(self.tmp, "blockswapd.toml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_notify_ready_status_and_stopping_on_sigterm(self):
        daemon = self.start()
        ready = daemon.messages(until="READY=1")
        self.assertTrue(ready and "READY=1" in ready[-1].split("\n"), ready)
        self.assertRegex(ready[-1], r"(?m)^STATUS=serving: 0 clients, 0 models, 0 bytes pinned$")
        # READY=1 comes only once the socket accepts.
        self.assertTrue(stat.S_ISSOCK(os.stat(daemon.socket_path).st_mode))
        self.assertEqual(ctl(daemon, "health").stdout, "ok\n")
        daemon.process.send_signal(signal.SIGTERM)
        stopping = daemon.messages(until="STOPPING=1")
        self.assertTrue(stopping and "STOPPING=1" in stopping[-1].split("\n"), stopping)
        self.assertRegex(stopping[-1], r"(?m)^STATUS=shutting down \(")
        self.assertEqual(daemon.stop(), 0)

    def test_stats_watch_redraws_in_place_until_interrupted(self):
        daemon = self.start()
        self.assertTrue(daemon.messages(until="READY=1"))
        # On a terminal (a pty here; into a pipe it appends instead, which
        # blockswapctl_test checks) each refresh homes the cursor and clears
        # the screen, then draws the table.
        terminal, terminal_side = pty.openpty()
        watch = subprocess.Popen([os.path.join(BIN, "blockswapctl"), "--socket=" + daemon.socket_path,
                                  "stats", "--watch", "0.2"], stdout=terminal_side)
        os.close(terminal_side)
        reader = os.fdopen(terminal, "rb", buffering=0)
        # The table. Read until three frames are drawn (however slowly this machine
        # draws them), then interrupt: the watch must keep redrawing until then.
        clear = b"\x1b[H\x1b[J"
        out = b""
        deadline = time.monotonic() + 30
        while out.count(clear) < 3 and time.monotonic() < deadline and watch.poll() is None:
            ready, _, _ = select.select([reader], [], [], 0.5)
            if ready:
                out += os.read(terminal, 65536)
        self.assertIsNone(watch.poll(), "the watch exited before it was interrupted")
        watch.send_signal(signal.SIGINT)
        watch.wait(timeout=10)
        reader.close()
        out = out.decode()
        frames = out.split("\x1b[H\x1b[J")
        self.assertGreaterEqual(len(frames) - 1, 3, out)
        self.assertTrue(all("blockswapctl stats --watch" in frame for frame in frames[1:]), out)
        self.assertEqual(daemon.stop(), 0)

    def test_socket_is_0660_and_belongs_to_the_configured_group(self):
        group = grp.getgrnam("daemon")  # exists on every Debian system
        daemon = self.start(["--socket-group=daemon"])
        self.assertTrue(daemon.messages(until="READY=1"))
        info = os.stat(daemon.socket_path)
        self.assertEqual(stat.S_IMODE(info.st_mode), 0o660)
        self.assertEqual(info.st_gid, group.gr_gid)
        # The socket's group joins the allow list.
        self.assertRegex(daemon.log_text(), r"allowed uids: [0-9, ]+; gids: [0-9, ]*\b%d\b"
                         % group.gr_gid)
        self.assertEqual(daemon.stop(), 0)

    def test_unknown_socket_group_is_refused_naming_it(self):
        daemon = self.start(["--socket-group=no-such-group-blockswap"])
        self.assertEqual(daemon.process.wait(timeout=30), 1)
        self.assertIn("socket group 'no-such-group-blockswap' does not exist", daemon.log_text())
        self.assertIn("STATUS=failed to start", "".join(daemon.messages(timeout=1)))

    def test_a_masters_directory_others_may_enter_or_own_is_refused_saying_what_to_remove(self):
        shm = "/dev/shm/" + os.path.basename(self.tmp)
        cases = [("mode 0755", 0o755, None)]
        # Only root can give a directory to another uid; as anyone else the
        # mode case stands for both (the daemon's unit test runs it as well).
        if os.geteuid() == 0:
            cases.append(("uid 65534", 0o700, 65534))
        for name, mode, owner in cases:
            with self.subTest(name):
                os.mkdir(shm)
                daemon = None
                try:
                    os.chmod(shm, mode)
                    if owner is not None:
                        os.chown(shm, owner, owner)
                    want = "masters directory %s belongs to uid %d with mode 0%o" % (
                        shm, os.geteuid() if owner is None else owner, mode)
                    remove = "Remove it as root (rm -rf %s)" % shm
                    daemon = self.start()
                    self.assertEqual(daemon.process.wait(timeout=30), 1)
                    self.assertIn(want, daemon.log_text())
                    self.assertIn(remove, daemon.log_text())
                    self.assertIn("plant files for blockswapd to adopt", daemon.log_text())
                    self.assertEqual(os.listdir(shm), [], "the refused directory was written to")
                    out = subprocess.run([os.path.join(BIN, "blockswapd"), "--config=/dev/null",
                                          "--shm-prefix=" + shm, "--check-config"],
                                         capture_output=True, text=True, timeout=30)
                    self.assertEqual(out.returncode, 1, out.stdout)  # 2: a config that does not parse
                    self.assertIn(want, out.stderr)
                    self.assertIn(remove, out.stderr)
                finally:
                    if daemon is not None:
                        daemon.close()  # removes the directory too
                        os.unlink(daemon.notify_path)
                    subprocess.run(["rm", "-rf", shm])
        out = subprocess.run([os.path.join(BIN, "blockswapd"), "--config=/dev/null",
                              "--shm-prefix=" + shm, "--check-config"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("# masters directory: %s is absent: blockswapd creates it" % shm, out.stdout)

    def test_command_line_overrides_the_config_file(self):
        config = self.write_config('socket = "/from/file.sock"\nlog_level = "warning"\n'
                                   'max_rings_per_client = 3\n')
        out = subprocess.run([os.path.join(BIN, "blockswapd"), "--config=" + config,
                              "--check-config", "--log-level=debug"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn('\nsocket = "/from/file.sock"\n', out.stdout)
        self.assertIn('\nlog_level = "debug"\n', out.stdout)
        self.assertIn("\nmax_rings_per_client = 3\n", out.stdout)

    def test_check_config_names_the_bad_key_and_exits_two(self):
        config = self.write_config('socket = "/x.sock"\nmax_ring_per_client = 3\n')
        out = subprocess.run([os.path.join(BIN, "blockswapd"), "--config=" + config,
                              "--check-config"], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 2)
        self.assertIn("blockswapd.toml:2: unknown key 'max_ring_per_client'", out.stderr)
        self.assertEqual(out.stdout, "")
        out = subprocess.run([os.path.join(BIN, "blockswapd"), "--config=/nonexistent.toml",
                              "--check-config"], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 2)
        self.assertIn("/nonexistent.toml", out.stderr)

    def test_check_config_reports_what_this_machine_would_trip_the_daemon_on(self):
        shm = os.path.join(self.tmp, "masters")
        config = self.write_config(
            'socket = "%s/no-such-dir/d.sock"\nsocket_group = "no-such-group-blockswap"\n'
            'shm_prefix = "%s"\nmax_pinned_bytes = "64TiB"\nallow_uids = [3999999999]\n'
            % (self.tmp, shm))
        check = [os.path.join(BIN, "blockswapd"), "--config=" + config, "--check-config"]
        out = subprocess.run(check, capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertIn("error: socket group 'no-such-group-blockswap' does not exist", out.stderr)
        self.assertRegex(out.stderr, r"error: max_pinned_bytes \(70368744177664 bytes, [^)]*\) is "
                         r"more than the filesystem of %s holds" % re.escape(shm))
        self.assertIn("warning: socket %s/no-such-dir/d.sock: its directory" % self.tmp, out.stderr)
        self.assertIn("warning: allow_uids: no user with uid 3999999999", out.stderr)
        self.assertIn('\nmax_pinned_bytes = ', out.stdout, "the effective config comes first")
        # The same config checked for another machine: its syntax only.
        out = subprocess.run(check + ["--no-preflight"], capture_output=True, text=True,
                             timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stderr, "")

    def test_sighup_reloads_log_level_and_quotas_and_keeps_them_on_a_bad_file(self):
        config = self.write_config('max_rings_per_client = 2\nmetrics_listen = "127.0.0.1:0"\n')
        daemon = self.start(config=config)
        self.assertTrue(daemon.messages(until="READY=1"))
        port = int(daemon.await_log(r"metrics on \S+ \(port (\d+)\)").group(1))
        quota = 'blockswap_quota_count{quota="max_rings_per_client"}'
        self.assertEqual(sample(metrics(port), quota), 2)

        self.write_config('max_rings_per_client = 5\nlog_level = "debug"\n'
                          'metrics_listen = "127.0.0.1:0"\n')
        daemon.process.send_signal(signal.SIGHUP)
        reload = daemon.messages(until="READY=1")
        self.assertIn("RELOADING=1", "".join(reload))
        self.assertIn("READY=1", reload[-1])
        self.assertTrue(daemon.await_log(
            r"reloaded: log level debug, quotas \(0: unlimited\): .*max_rings_per_client = 5,"))
        self.assertEqual(sample(metrics(port), quota), 5)

        self.write_config('max_rings_per_client = "many"\n')
        daemon.process.send_signal(signal.SIGHUP)
        self.assertTrue(daemon.messages(until="READY=1"))
        self.assertTrue(daemon.await_log(
            r"\[error\] SIGHUP: the config was not reloaded: .*blockswapd.toml:1: "
            r"max_rings_per_client"))
        self.assertEqual(sample(metrics(port), quota), 5)
        self.assertEqual(daemon.stop(), 0)

    def test_metrics_count_a_clients_loads_per_device(self):
        daemon = self.start(["--metrics-listen=127.0.0.1:0"])
        self.assertTrue(daemon.messages(until="READY=1"))
        port = int(daemon.await_log(r"metrics on \S+ \(port (\d+)\)").group(1))
        before = metrics(port)
        self.assertEqual(sample(before, 'blockswap_device_loads_total{device="HOST-0"}'), 0)
        self.assertEqual(sample(before, "blockswap_sessions"), 0)
        demo = subprocess.run([os.path.join(BIN, "blockswap-demo"), "--socket=" + daemon.socket_path,
                               "--blocks=6", "--swap=3", "--ring=2", "--block-bytes=65536",
                               "--steps=3"], capture_output=True, text=True, timeout=120)
        self.assertEqual(demo.returncode, 0, demo.stdout + demo.stderr)
        after = metrics(port)
        loads = sample(after, 'blockswap_device_loads_total{device="HOST-0"}')
        self.assertGreater(loads, 0)
        self.assertGreaterEqual(sample(after, 'blockswap_device_bytes_total{device="HOST-0"}'),
                                loads * 65536 * 0.9)
        self.assertEqual(sample(after, "blockswap_models"), 1)
        self.assertGreater(sample(after, "blockswap_pinned_bytes"), 0)
        # Every copy the daemon saw complete is in the latency histogram.
        latency = 'blockswap_device_load_latency_seconds_count{device="HOST-0"}'
        self.assertGreater(sample(after, latency), 0)
        self.assertLessEqual(sample(after, latency), loads)
        self.assertEqual(sample(after, 'blockswap_device_load_latency_seconds_bucket'
                                       '{device="HOST-0",le="+Inf"}'), sample(after, latency))
        self.assertGreater(sample(after, "process_open_fds"), 3)
        self.assertGreater(sample(after, "process_resident_memory_bytes"), 1 << 20)
        # A connection speaking neither gRPC nor the side channel is refused, and counted.
        self.assertEqual(sample(after, "blockswap_refused_connections_total"), 0)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stranger:
            stranger.connect(daemon.socket_path)
            stranger.sendall(b"GET /metrics HTTP/1.1\r\n\r\n" + b"x" * 64)
            stranger.settimeout(10)
            try:
                self.assertEqual(stranger.recv(1), b"", "the daemon closes it")
            except ConnectionResetError:
                pass  # closed with our bytes unread: a reset
        deadline = time.monotonic() + 10
        while sample(metrics(port), "blockswap_refused_connections_total") < 1:
            self.assertLess(time.monotonic(), deadline, "the refusal was not counted")
            time.sleep(0.05)
        self.assertEqual(sample(metrics(port), "blockswap_quota_refusals_total"), 0)
        self.assertEqual(daemon.stop(), 0)

    def test_info_log_has_a_line_per_session_ring_and_model_event(self):
        daemon = self.start()
        self.assertTrue(daemon.messages(until="READY=1"))
        demo = subprocess.run([os.path.join(BIN, "blockswap-demo"), "--name=logged",
                               "--socket=" + daemon.socket_path, "--blocks=6", "--swap=3",
                               "--ring=2", "--block-bytes=65536", "--steps=2"],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(demo.returncode, 0, demo.stdout + demo.stderr)
        who = r"session (\d+) \(pid \d+, uid %d, 'logged'\): " % os.getuid()
        attached = daemon.await_log(who + "attached")
        self.assertTrue(attached, daemon.log_text())
        session = attached.group(1)
        who = r"session %s \(pid \d+, uid %d, 'logged'\): " % (session, os.getuid())
        for event in (r"(registered|opened) model [0-9a-f]{16} \(\d+ bytes of masters\)",
                      r"created ring \d+ on HOST-0 \(2 slots of \d+ bytes\)",
                      r"destroyed ring \d+", r"(detached|ended: its process exited)"):
            self.assertTrue(daemon.await_log(who + event), "%s\n%s" % (event, daemon.log_text()))
        self.assertEqual(daemon.stop(), 0)

    def test_quota_refusals_and_freed_rings_are_logged(self):
        daemon = self.start(["--max-sessions-per-uid=1", "--log-level=debug"])
        self.assertTrue(daemon.messages(until="READY=1"))
        demo = [os.path.join(BIN, "blockswap-demo"), "--socket=" + daemon.socket_path,
                "--blocks=6", "--swap=3", "--ring=2", "--block-bytes=65536"]
        first = subprocess.Popen(demo + ["--name=first", "--steps=1000000", "--compute-us=200"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.assertTrue(daemon.await_log(r"'first'\): created ring"), daemon.log_text())
            second = subprocess.run(demo + ["--name=second", "--steps=1"], capture_output=True,
                                    text=True, timeout=60)
            self.assertNotEqual(second.returncode, 0, second.stdout)
            self.assertTrue(daemon.await_log(r"quota refusal for pid \d+ \(uid %d\): .*"
                                             r"max_sessions_per_uid" % os.getuid()),
                            daemon.log_text())
        finally:
            first.terminate()
            first.wait(timeout=30)
        self.assertTrue(daemon.await_log(r"\[debug\] ring \d+ of session \d+ freed on HOST-0 "
                                         r"after \d+ loads"), daemon.log_text())
        self.assertEqual(daemon.stop(), 0)

    def test_sigterm_drains_a_streaming_client_within_the_grace(self):
        daemon = self.start(["--shutdown-grace=1"])
        self.assertTrue(daemon.messages(until="READY=1"))
        demo = subprocess.Popen([os.path.join(BIN, "blockswap-demo"), "--name=drainer",
                                 "--socket=" + daemon.socket_path, "--blocks=6", "--swap=3",
                                 "--block-bytes=65536", "--steps=1000000", "--compute-us=200",
                                 # It would re-attach to a daemon started again
                                 # within this; none is.
                                 "--reconnect-timeout=2"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and "drainer" not in ctl(daemon, "clients").stdout:
                time.sleep(0.05)
            self.assertIn("drainer", ctl(daemon, "clients").stdout)
            started = time.monotonic()
            daemon.process.send_signal(signal.SIGTERM)
            self.assertEqual(daemon.stop(timeout=30), 0)
            # Bounded: the grace (1 s) plus the retirement of its rings.
            self.assertLess(time.monotonic() - started, 10)
            self.assertIn("waiting up to 1s for 1 attached clients to detach", daemon.log_text())
            _, err = demo.communicate(timeout=30)
            # The client fails with UNAVAILABLE (its ring's status word says
            # "blockswapd is shutting down"; a call after the server stopped
            # says the socket is gone) instead of hanging.
            self.assertNotEqual(demo.returncode, 0)
            self.assertIn("UNAVAILABLE", err[-2000:])
        finally:
            if demo.poll() is None:
                demo.kill()
                demo.wait()


class BackendAutoTest(unittest.TestCase):
    """`backend = "auto"` serves from CPU memory only where there is no GPU at
    all. The machines are fake kernel trees (BLOCKSWAP_GPU_PROBE_ROOT), and
    CUDA_VISIBLE_DEVICES="" hides any real GPU, so that the cuda backend cannot
    drive one here whether or not this machine has one."""

    def setUp(self):
        if not TEST_HOOKS:
            self.skipTest("needs BLOCKSWAP_GPU_PROBE_ROOT, which only a build with test hooks "
                          "has (-DBLOCKSWAP_TEST_HOOKS=ON, as tests/run.sh configures)")
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def list_devices(self, backend, gpu):
        machine = os.path.join(self.root, "gpu" if gpu else "cpu")
        vendor = "0x10de" if gpu else "0x1af4"
        device = os.path.join(machine, "sys", "bus", "pci", "devices", "0000:17:00.0")
        os.makedirs(device, exist_ok=True)
        for name, text in (("vendor", vendor), ("class", "0x030200")):
            with open(os.path.join(device, name), "w") as f:
                f.write(text + "\n")
        env = dict(os.environ, BLOCKSWAP_GPU_PROBE_ROOT=machine, CUDA_VISIBLE_DEVICES="")
        return subprocess.run([os.path.join(BIN, "blockswapd"), "--list-devices",
                               "--backend=" + backend], env=env, capture_output=True, text=True,
                              timeout=60)

    def test_a_gpu_that_cannot_be_driven_is_refused_with_the_way_out(self):
        out = self.list_devices("auto", gpu=True)
        self.assertNotEqual(out.returncode, 0, out.stdout)
        self.assertIn("this machine has an NVIDIA GPU (PCI device 0000:17:00.0", out.stderr)
        self.assertIn("cannot drive it: ", out.stderr)
        self.assertIn('backend = "host"', out.stderr)
        self.assertNotIn("backend host", out.stdout)

    def test_the_host_backend_chosen_deliberately_serves_beside_that_gpu(self):
        out = self.list_devices("host", gpu=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("backend host", out.stdout)

    def test_a_machine_without_a_gpu_gets_the_host_backend(self):
        out = self.list_devices("auto", gpu=False)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("backend host", out.stdout)


if __name__ == "__main__":
    BIN = os.path.abspath(sys.argv.pop(1))
    if "--test-hooks" in sys.argv:
        sys.argv.remove("--test-hooks")
        TEST_HOOKS = True
    unittest.main(verbosity=2)
