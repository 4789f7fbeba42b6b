"""The test-only Kubernetes control plane of the Kubernetes tests (docs/kubernetes.md), on loopback.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler, so that Deployments and DaemonSets become pods, and
kwok's controller, which stands in for the kubelets of the nodes it is given (annotation kwok.x-k8s.io/node=fake): it
marks them Ready and their pods Running (but a pod annotated gpucluster.ops/kwok-unready, which stays Pending), while
no container runs. The binaries come from scripts/ensure-k8s.sh (one
build per machine). Every process listens on 127.0.0.1 on ports the system hands out, keeps its state in one
directory, and runs at a low CPU priority; stop() ends them all.

    python3 tests/support/k8s_control_plane.py DIR     # start one and keep it until Ctrl-C (a kubeconfig in DIR)
"""

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubectl", "helm", "kueue")
# The annotation kwok manages nodes by.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
# A pod with this annotation is never made ready (kwok's pod-ready stage skips it): it stays Pending, as a pod whose
# image cannot be pulled would, so a release waiting for it times out (the --atomic rollback of the tests).
KWOK_UNREADY_ANNOTATION = "gpucluster.ops/kwok-unready"
# A Job's pod with this annotation keeps running (kwok's pod-complete stage skips it) until the test deletes it: a
# training job that holds its GPUs while Kueue admits, lends and preempts around it.
KWOK_KEEP_RUNNING_ANNOTATION = "gpucluster.ops/kwok-keep-running"
# Kueue's admission webhooks kept: those of its own objects and of batch/v1 Jobs (the one integration enabled).
KUEUE_WEBHOOK_GROUPS = ("kueue.x-k8s.io", "batch")
NICE = 10


def ensure_binaries():
    """The directory of the built components (scripts/ensure-k8s.sh, which builds them on a machine without)."""
    proc = subprocess.run([os.path.join(ROOT, "scripts", "ensure-k8s.sh")], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError("scripts/ensure-k8s.sh failed: %s" % (proc.stderr.strip() or proc.stdout.strip()))
    bin_dir = proc.stdout.strip().splitlines()[-1]
    missing = [name for name in COMPONENTS if not os.access(os.path.join(bin_dir, name), os.X_OK)]
    if missing:
        raise RuntimeError("the Kubernetes test components %s are missing from %s" % (", ".join(missing), bin_dir))
    return bin_dir


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ControlPlane(object):
    """One control plane in `workdir`: start(), then kubeconfig and kubectl(); stop() at the end."""

    def __init__(self, bin_dir, workdir):
        self.bin = bin_dir
        self.dir = os.path.abspath(workdir)
        self.procs = {}
        self.token = "gpucluster-tests-admin"
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")
        self.server = None

    # --- the pieces -------------------------------------------------------------------------------------------
    def _path(self, *parts):
        return os.path.join(self.dir, *parts)

    def _spawn(self, name, argv):
        log = open(self._path("%s.log" % name), "ab")
        program = argv[0] if os.path.isabs(argv[0]) else os.path.join(self.bin, argv[0])
        self.procs[name] = subprocess.Popen([program] + argv[1:], stdout=log,
                                            stderr=subprocess.STDOUT, cwd=self.dir, start_new_session=True,
                                            preexec_fn=lambda: os.nice(NICE))
        log.close()

    def _log_tail(self, name, chars=3000):
        try:
            with open(self._path("%s.log" % name), "rb") as handle:
                handle.seek(0, 2)
                handle.seek(max(0, handle.tell() - chars))
                return handle.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _check_alive(self):
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError("%s exited (%s): %s" % (name, proc.returncode, self._log_tail(name)))

    def _stages(self):
        """kwok's released stages, the pod-ready one skipping pods annotated KWOK_UNREADY_ANNOTATION."""
        import yaml  # pylint: disable=import-outside-toplevel
        with open(os.path.join(self.bin, "kwok-stages.yaml")) as handle:
            stages = [doc for doc in yaml.safe_load_all(handle) if doc]
        ready = [s for s in stages if s.get("metadata", {}).get("name") == "pod-ready"]
        if len(ready) != 1:
            raise RuntimeError("kwok's stages in %s have no single pod-ready stage" % self.bin)
        ready[0]["spec"]["selector"].setdefault("matchExpressions", []).append(
            {"key": '.metadata.annotations["%s"]' % KWOK_UNREADY_ANNOTATION, "operator": "DoesNotExist"})
        complete = [s for s in stages if s.get("metadata", {}).get("name") == "pod-complete"]
        if len(complete) != 1:
            raise RuntimeError("kwok's stages in %s have no single pod-complete stage" % self.bin)
        complete[0]["spec"]["selector"].setdefault("matchExpressions", []).append(
            {"key": '.metadata.annotations["%s"]' % KWOK_KEEP_RUNNING_ANNOTATION, "operator": "DoesNotExist"})
        path = self._path("kwok-stages.yaml")
        with open(path, "w") as handle:
            yaml.safe_dump_all(stages, handle, sort_keys=False)
        return path

    def _keys(self):
        key = self._path("sa.key")
        if not os.path.exists(key):
            subprocess.run(["openssl", "genrsa", "-out", key, "2048"], check=True, capture_output=True)
            subprocess.run(["openssl", "rsa", "-in", key, "-pubout", "-out", self._path("sa.pub")], check=True,
                           capture_output=True)
        with open(self._path("tokens.csv"), "w") as handle:
            handle.write('%s,admin,admin,"system:masters"\n' % self.token)

    def _write_kubeconfig(self):
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "gpucluster-tests",
            "clusters": [{"name": "gpucluster-tests", "cluster": {"server": self.server,
                                                                  "insecure-skip-tls-verify": True}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "gpucluster-tests", "context": {"cluster": "gpucluster-tests", "user": "admin"}}],
        }
        with open(self.kubeconfig, "w") as handle:
            json.dump(config, handle, indent=1)
        os.chmod(self.kubeconfig, 0o600)

    def _get(self, path):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        request = urllib.request.Request(self.server + path, headers={"Authorization": "Bearer " + self.token})
        with urllib.request.urlopen(request, context=context, timeout=5) as response:
            return response.status, response.read().decode()

    def wait(self, what, probe, timeout=60):
        """The first true value of ``probe()`` within ``timeout`` s; fails naming ``what``, or at once naming a
        component of the control plane that exited."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                value = probe()
                if value:
                    return value
            except (OSError, urllib.error.URLError, subprocess.CalledProcessError, ValueError) as error:
                last = error
            time.sleep(0.5)
        raise RuntimeError("%s not within %d s (%s)" % (what, timeout, last))

    # --- the whole ----------------------------------------------------------------------------------------------
    def start(self, timeout=180):
        os.makedirs(self._path("pki"), exist_ok=True)
        self._keys()
        etcd_client, etcd_peer, api = _free_port(), _free_port(), _free_port()
        self.server = "https://127.0.0.1:%d" % api
        self._write_kubeconfig()
        self._spawn("etcd", [
            "etcd", "--name", "gpucluster-tests", "--data-dir", self._path("etcd"), "--log-level", "warn",
            "--listen-client-urls", "http://127.0.0.1:%d" % etcd_client,
            "--advertise-client-urls", "http://127.0.0.1:%d" % etcd_client,
            "--listen-peer-urls", "http://127.0.0.1:%d" % etcd_peer,
            "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % etcd_peer,
            "--initial-cluster", "gpucluster-tests=http://127.0.0.1:%d" % etcd_peer, "--unsafe-no-fsync"])
        self._spawn("kube-apiserver", [
            "kube-apiserver", "--etcd-servers", "http://127.0.0.1:%d" % etcd_client,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(api),
            "--cert-dir", self._path("pki"), "--token-auth-file", self._path("tokens.csv"),
            "--authorization-mode", "RBAC", "--allow-privileged=true",
            "--service-cluster-ip-range", "10.96.0.0/16",
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", self._path("sa.pub"),
            "--service-account-signing-key-file", self._path("sa.key"),
            "--api-audiences", "https://kubernetes.default.svc.cluster.local"])
        self.wait("kube-apiserver ready", lambda: self._get("/readyz")[0] == 200, timeout)
        self._spawn("kube-controller-manager", [
            "kube-controller-manager", "--kubeconfig", self.kubeconfig, "--authentication-kubeconfig", self.kubeconfig,
            "--authorization-kubeconfig", self.kubeconfig, "--leader-elect=false",
            "--bind-address", "127.0.0.1", "--secure-port", str(_free_port()),
            "--service-account-private-key-file", self._path("sa.key"), "--use-service-account-credentials=false",
            "--controllers", "*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle"])
        self._spawn("kube-scheduler", [
            "kube-scheduler", "--kubeconfig", self.kubeconfig, "--authentication-kubeconfig", self.kubeconfig,
            "--authorization-kubeconfig", self.kubeconfig, "--leader-elect=false",
            "--bind-address", "127.0.0.1", "--secure-port", str(_free_port())])
        self._spawn("kwok", [
            "kwok", "--kubeconfig", self.kubeconfig, "--config", self._stages(),
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector", "%s=fake" % KWOK_NODE_ANNOTATION,
            "--cidr", "10.244.0.0/16", "--node-ip", "10.0.0.1", "--server-address", "127.0.0.1:%d" % _free_port()])
        # the controller manager made the default ServiceAccount: pods can be admitted
        self.wait("the default ServiceAccount", lambda: self._get(
            "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200, timeout)
        return self

    def start_kueue(self, timeout=120):
        """Kueue's manager beside the control plane, out of cluster as Kueue's own integration tests run it: its CRDs
        (from the same module), a CA and serving certificate made here, its admission webhooks (those of its objects
        and of batch/v1 Jobs, the one integration enabled) pointing at it on loopback, internal cert management,
        leader election and the visibility server off. Returns the kubectl output of its CRDs."""
        import base64  # pylint: disable=import-outside-toplevel
        import yaml  # pylint: disable=import-outside-toplevel
        if os.geteuid() != 0:
            raise RuntimeError("Kueue's manager runs in a mount namespace of its own (its metrics certificate path "
                               "is fixed under /etc): that needs root, as make test runs")
        kueue = os.path.join(self.bin, "kueue")
        missing = [p for p in (kueue, os.path.join(self.bin, "kueue-crds"), os.path.join(self.bin, "kueue-webhooks.yaml"))
                   if not os.path.exists(p)]
        if missing:
            raise RuntimeError("Kueue's %s missing: run scripts/ensure-k8s.sh" % ", ".join(missing))
        certs = self._path("kueue-certs")
        os.makedirs(certs, exist_ok=True)
        ca_key, ca_crt = os.path.join(certs, "ca.key"), os.path.join(certs, "ca.crt")
        key, csr, crt = (os.path.join(certs, name) for name in ("tls.key", "tls.csr", "tls.crt"))
        ext = os.path.join(certs, "san.ext")
        with open(ext, "w") as handle:
            handle.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        for argv in (["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca_crt,
                      "-days", "2", "-subj", "/CN=gpucluster-tests-kueue-ca"],
                     ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
                      "-subj", "/CN=127.0.0.1"],
                     ["openssl", "x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial",
                      "-out", crt, "-days", "2", "-extfile", ext]):
            subprocess.run(argv, check=True, capture_output=True)
        with open(ca_crt, "rb") as handle:
            ca_bundle = base64.b64encode(handle.read()).decode()
        self.kubectl("apply", "--server-side", "-f", os.path.join(self.bin, "kueue-crds"))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", os.path.join(self.bin, "kueue-crds"))
        self.kubectl("create", "namespace", "kueue-system")
        port, health = _free_port(), _free_port()
        with open(os.path.join(self.bin, "kueue-webhooks.yaml")) as handle:
            configurations = [d for d in yaml.safe_load_all(handle) if d]
        for configuration in configurations:
            kept = []
            for hook in configuration.get("webhooks") or []:
                groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
                if groups and groups <= set(KUEUE_WEBHOOK_GROUPS):
                    hook["clientConfig"] = {"url": "https://127.0.0.1:%d%s" % (port, hook["clientConfig"]["service"]["path"]),
                                            "caBundle": ca_bundle}
                    kept.append(hook)
            configuration["webhooks"] = kept
            configuration["metadata"]["name"] = "kueue-" + configuration["metadata"]["name"]
        config = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": "kueue-system",
                  "health": {"healthProbeBindAddress": "127.0.0.1:%d" % health}, "metrics": {"bindAddress": "0"},
                  "webhook": {"port": port, "host": "127.0.0.1", "certDir": certs},
                  "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
                  "featureGates": {"VisibilityOnDemand": False},
                  "integrations": {"frameworks": ["batch/job"]}}
        with open(self._path("kueue-config.yaml"), "w") as handle:
            yaml.safe_dump(config, handle)
        # Kueue reads its metrics certificate from a fixed path, /etc/kueue/metrics/certs, when it manages no
        # certificates itself: in a mount namespace of its own, /etc is an overlay whose upper layer (in the test's
        # directory) has that path, the test's certificate. The machine's /etc is left as it is.
        upper, work = self._path("kueue-etc", "upper"), self._path("kueue-etc", "work")
        os.makedirs(upper, exist_ok=True)
        os.makedirs(work, exist_ok=True)
        script = ('mount -t overlay overlay -o lowerdir=/etc,upperdir="$1",workdir="$2" /etc && '
                  'mkdir -p /etc/kueue/metrics && ln -sfn "$3" /etc/kueue/metrics/certs && shift 3 && exec "$@"')
        self._spawn("kueue", [shutil.which("unshare") or "/usr/bin/unshare", "--mount", "--propagation", "private",
                              "sh", "-c", script, "kueue-wrapper", upper, work, certs,
                              os.path.join(self.bin, "kueue"), "--config", self._path("kueue-config.yaml"),
                              "--kubeconfig", self.kubeconfig, "--zap-log-level", "2"])

        def ready():
            with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % health, timeout=5) as response:
                return response.status == 200
        self.wait("Kueue's manager ready", ready, timeout)
        # the webhooks only once the manager serves them: before, every Job and Kueue object would be refused
        self.kubectl("apply", "-f", "-", input_text="\n---\n".join(json.dumps(c) for c in configurations))
        return self.kubectl("get", "crd", "-o", "name")

    def kubectl(self, *args, check=True, input_text=None):
        proc = subprocess.run([os.path.join(self.bin, "kubectl"), "--kubeconfig", self.kubeconfig] + list(args),
                              capture_output=True, text=True, input=input_text, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError("kubectl %s: %s" % (" ".join(args), proc.stderr.strip()))
        return proc.stdout

    def add_node(self, name, labels=None, gpus=8):
        """A node that kwok stands in for: Ready, with GPUs in its capacity."""
        capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "annotations": {KWOK_NODE_ANNOTATION: "fake"},
                             "labels": dict({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                             "kubernetes.io/arch": "amd64", "type": "kwok"}, **(labels or {}))},
                "status": {"capacity": capacity, "allocatable": capacity}}
        self.kubectl("apply", "-f", "-", input_text=json.dumps(node))
        self.wait("node %s Ready" % name, lambda: "True" == self.kubectl(
            "get", "node", name, "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"), 60)

    def stop(self):
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        # A test's control plane keeps nothing worth a graceful shutdown: 5 s in all, then SIGKILL.
        deadline = time.monotonic() + 5
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 64
    # SIGTERM (timeout, kill) stops it as Ctrl-C does: its components run in sessions of their own and would outlive it
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    plane = ControlPlane(ensure_binaries(), argv[1]).start()
    print("control plane up: KUBECONFIG=%s (Ctrl-C stops it)" % plane.kubeconfig, flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
