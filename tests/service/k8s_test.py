#!/usr/bin/env python3
"""The Kubernetes manifests of deploy/k8s/: yamllint (when installed) and the
Kubernetes schemas (kubernetes-validate --strict), then the fields a GPU node
needs, the ConfigMap's config through the real `blockswapd --check-config` (its
syntax: the config is for a GPU node, not this machine),
and the example Job's program in an installed tree.

    k8s_test.py SOURCE_DIR BUILD_DIR BIN_DIR KUBERNETES_VALIDATE
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

SOURCE = BUILD = BIN = KUBERNETES_VALIDATE = None


def load(name):
    with open(os.path.join(SOURCE, "deploy", "k8s", name)) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc]


def one(docs, kind):
    found = [doc for doc in docs if doc["kind"] == kind]
    assert len(found) == 1, "%d %s documents" % (len(found), kind)
    return found[0]


def parse_bytes(text):
    """'96GiB' (the config's sizes) or '100Gi' (Kubernetes quantities) -> bytes."""
    match = re.fullmatch(r"(\d+)\s*(|Ki|Mi|Gi|Ti|KiB|MiB|GiB|TiB)", text.strip())
    assert match, "not a size: %r" % text
    power = ["", "K", "M", "G", "T"].index(match.group(2)[:1])
    return int(match.group(1)) * 1024 ** power


def kubernetes_validate(paths):
    return subprocess.run([KUBERNETES_VALIDATE, "--strict", "--quiet"] + paths,
                          capture_output=True, text=True, timeout=60)


def requests_gpu(container):
    resources = container.get("resources", {})
    return any("nvidia.com/gpu" in resources.get(part, {}) for part in ("requests", "limits"))


class ManifestTest(unittest.TestCase):
    def setUp(self):
        self.daemon_docs = load("blockswapd-daemonset.yaml")
        self.daemonset = one(self.daemon_docs, "DaemonSet")
        self.pod = self.daemonset["spec"]["template"]["spec"]
        self.container = self.pod["containers"][0]
        self.config = one(self.daemon_docs, "ConfigMap")["data"]["blockswapd.toml"]
        self.job = one(load("example-trainer-job.yaml"), "Job")
        self.job_pod = self.job["spec"]["template"]["spec"]

    def test_yamllint(self):
        if shutil.which("yamllint") is None:
            self.skipTest("yamllint is not installed (deploy/install-deps.sh installs it)")
        rules = "{extends: default, rules: {line-length: {max: 100}, document-start: disable}}"
        out = subprocess.run(["yamllint", "-s", "-d", rules,
                              os.path.join(SOURCE, "deploy", "k8s")],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_manifests_match_the_kubernetes_schemas(self):
        k8s = os.path.join(SOURCE, "deploy", "k8s")
        out = kubernetes_validate(sorted(os.path.join(k8s, f) for f in os.listdir(k8s)
                                         if f.endswith(".yaml")))
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_schema_validation_refuses_an_unknown_field(self):
        # The same invocation must be able to fail: the Job with a misspelt key.
        with open(os.path.join(SOURCE, "deploy", "k8s", "example-trainer-job.yaml")) as f:
            text = f.read()
        self.assertIn("          command:", text)
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as bad:
            bad.write(text.replace("          command:", "          comand:", 1))
            bad.flush()
            out = kubernetes_validate([bad.name])
        self.assertNotEqual(out.returncode, 0, out.stdout)
        self.assertIn("'comand' was unexpected", out.stdout + out.stderr)

    def test_metrics_listen_on_the_pod_address_prometheus_scrapes(self):
        command = self.container["command"]
        listen = [arg for arg in command if arg.startswith("--metrics-listen=")]
        self.assertEqual(listen, ["--metrics-listen=$(POD_IP):9464"], command)
        env = {e["name"]: e for e in self.container["env"]}
        self.assertEqual(env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP")
        ports = {p["name"]: p["containerPort"] for p in self.container["ports"]}
        annotations = self.daemonset["spec"]["template"]["metadata"]["annotations"]
        self.assertEqual(str(ports["metrics"]), annotations["prometheus.io/port"])
        self.assertEqual(ports["metrics"], 9464)
        self.assertNotIn("metrics_listen =", self.config, "the command line sets it")

    def test_memory_limit_holds_the_masters_budget(self):
        # The masters' /dev/shm pages are charged to the daemon's container.
        budgets = dict(re.findall(r'^(max_memory_bytes|max_pinned_bytes) = "([^"]+)"',
                                  self.config, re.M))
        budget = parse_bytes(budgets.get("max_memory_bytes") or budgets["max_pinned_bytes"])
        resources = self.container["resources"]
        limit = parse_bytes(resources["limits"]["memory"])
        self.assertGreaterEqual(limit, budget + 2 * 1024**3,
                                "limit %s for a budget of %d bytes" % (limit, budget))
        self.assertEqual(resources["requests"]["memory"], resources["limits"]["memory"])

    def test_trainer_job_runs_a_program_the_install_provides(self):
        command = self.job_pod["containers"][0]["command"]
        with tempfile.TemporaryDirectory() as prefix:
            subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix], check=True,
                           capture_output=True, timeout=120)
            self.assertTrue(os.access(os.path.join(prefix, "bin", command[0]), os.X_OK),
                            "%s is not installed into bin/" % command[0])

    def test_daemonset_sees_every_gpu_without_requesting_one(self):
        env = {e["name"]: e.get("value") for e in self.container["env"]}
        self.assertEqual(env.get("NVIDIA_VISIBLE_DEVICES"), "all")
        self.assertFalse(requests_gpu(self.container),
                         "a nvidia.com/gpu request would take a GPU from the trainers")

    def test_daemonset_sees_its_peers_pids_and_shares_no_ipc_namespace(self):
        # hostPID: SO_PEERCRED pids of trainer pods (the peer's pidfd, quotas).
        self.assertIs(self.pod.get("hostPID"), True)
        # Every GPU object reaches a trainer as a descriptor over the socket.
        self.assertIsNone(self.pod.get("hostIPC"))

    def test_socket_directory_and_dev_shm_come_from_the_node(self):
        volumes = {v["name"]: v for v in self.pod["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in self.container["volumeMounts"]}
        self.assertEqual(volumes[mounts["/run/blockswap"]]["hostPath"]["path"], "/run/blockswap")
        self.assertEqual(volumes[mounts["/dev/shm"]]["hostPath"]["path"], "/dev/shm")
        self.assertIn('socket = "/run/blockswap/blockswapd.sock"', self.config)

    def test_probes_run_blockswapctl_health_on_the_socket(self):
        for probe in ("readinessProbe", "livenessProbe"):
            command = self.container[probe]["exec"]["command"]
            self.assertEqual(command[0], "blockswapctl", probe)
            self.assertEqual(command[-1], "health", probe)
            self.assertIn("--socket=/run/blockswap/blockswapd.sock", command, probe)

    def test_the_daemon_may_pin_and_drains_within_its_grace(self):
        capabilities = self.container["securityContext"]["capabilities"]
        self.assertIn("IPC_LOCK", capabilities["add"])
        self.assertEqual(capabilities["drop"], ["ALL"])
        self.assertGreater(self.pod["terminationGracePeriodSeconds"], 20)  # shutdown_grace

    def test_configmap_config_passes_check_config(self):
        with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
            f.write(self.config)
            f.flush()
            out = subprocess.run([os.path.join(BIN, "blockswapd"), "--config=" + f.name,
                                  "--check-config", "--no-preflight"],
                                 capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn('socket_group = "2000"', out.stdout)

    def test_trainer_job_mounts_the_socket_and_joins_the_socket_group(self):
        # Nothing of the node's but the socket: descriptors come through it.
        self.assertIsNone(self.job_pod.get("hostPID"))
        self.assertIsNone(self.job_pod.get("hostIPC"))
        container = self.job_pod["containers"][0]
        volumes = {v["name"]: v for v in self.job_pod["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        self.assertEqual(volumes[mounts["/run/blockswap"]]["hostPath"]["path"], "/run/blockswap")
        self.assertIn(2000, self.job_pod["securityContext"]["supplementalGroups"])
        self.assertTrue(requests_gpu(container), "the trainer asks for its own GPU")


if __name__ == "__main__":
    SOURCE = os.path.abspath(sys.argv.pop(1))
    BUILD = os.path.abspath(sys.argv.pop(1))
    BIN = os.path.abspath(sys.argv.pop(1))
    KUBERNETES_VALIDATE = sys.argv.pop(1)
    unittest.main(verbosity=2)
