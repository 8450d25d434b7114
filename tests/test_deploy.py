"""Deployment files: the Grafana dashboard queries only metrics that exist, the Kubernetes and
Prometheus files parse and agree with the exporter's port and flags, the docs name every metric."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tracer.core.diagnosis import Finding
from tracer.core.interval import Interval
from tracer.core.model import Snapshot
from tracer.core.selfcost import ProgramCost, SelfCost, TracerCpu
from tracer.sinks.prometheus import DEFAULT_PORT, PrometheusSink, parse_listen

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read the deployment files")

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy/grafana/iotrace.json"
DAEMONSET = ROOT / "deploy/kubernetes/daemonset.yaml"
PROMETHEUS_YML = ROOT / "deploy/prometheus.yml"
DOC = ROOT / "docs/prometheus.md"
needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool not installed (make deps installs it: Debian's prometheus)")

PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
                "and", "or", "unless", "inf", "nan", "atan2"}
GRAFANA_VARS = {"__rate_interval": "1m", "__interval": "1m", "__range": "1h", "host": ".*",
                "device": ".+", "role": ".*"}


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (not functions, keywords, labels or strings)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # ranges and subqueries
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\{?\w+(?::\w+)?\}?", " ", e)  # Grafana variables
    names = set()
    for m in re.finditer(r"(?<![\w.:$])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()", e):
        if m.group(1).lower() not in PROMQL_WORDS:
            names.add(m.group(1))
    return names


def test_metric_names_extractor():
    expr = ('sum by (le, role) (rate(foo_bucket{a="b(c)", role=~"$role"}[$__rate_interval])) '
            '/ on (x) group_left (y) bar_total offset 5m > bool 1e9 and time() - baz')
    assert metric_names(expr) == {"foo_bucket", "bar_total", "baz"}
    assert metric_names('label_replace(up{job="x"}, "host", "$1", "instance", "(.*):[0-9]+")') == {"up"}


def exported_names() -> set[str]:
    """Every sample name iotrace serves once it has seen each kind of input."""
    sink = PrometheusSink()
    lat = [{"ts": 0, "pid": 1, "comm": "python", "role": "main", "layer": layer, "op": "read",
            "target": "file" if layer == "syscall" else None, "device": "vda", "attribution": None,
            "bucket_lo_ns": 1 << 14, "bucket_hi_ns": 1 << 15, "count": 1, "bytes": 4096}
           for layer in ("syscall", "block", "block_queue")]
    cost = SelfCost((ProgramCost("block", "p", "tp_btf/block_rq_issue", 10, 5000, 0),), 0,
                    {"hists": 0}, TracerCpu(1.0, 0.5, 2.0, 25.0, 25.0, 1 << 27))
    sink.write(Interval(Snapshot(10**18, 10**9, lat, cost=cost), [{"compute_ns": 10**9}],
                        [Finding("sync_loading", 50, 1, "x", {})],
                        gpu_idle=[{"gpu": 0, "cause": "sync_loading", "duration_ns": 10**9}],
                        events_lost=1))
    return {s.name for fam in sink.registry.collect() for s in fam.samples}


def panels(dashboard: dict) -> list[dict]:
    out = []
    for p in dashboard["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # collapsed rows hold their panels
    return out


def exprs(dashboard: dict) -> list[str]:
    found = [t["expr"] for p in panels(dashboard) for t in p.get("targets", []) if t.get("expr")]
    for v in dashboard["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((.*),\s*\w+\)", q)
            assert m, f"variable {v['name']}: unexpected query {q}"
            found.append(m.group(1))
    return found


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def test_dashboard_loads(dashboard):
    assert dashboard["schemaVersion"] >= 36
    assert dashboard["uid"] and dashboard["title"]
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "host", "device", "role"} <= variables
    for p in panels(dashboard):
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p.get("targets"), p["title"]
        for t in p["targets"]:
            assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
            used = set(re.findall(r"\$(\w+)", t["expr"])) - {"1"}
            assert used <= variables | {"__rate_interval", "__range", "__interval"}, (p["title"], used)


def test_dashboard_panels_do_not_overlap(dashboard):
    boxes = [(p["title"], p["gridPos"]) for p in dashboard["panels"]]
    for i, (ta, a) in enumerate(boxes):
        assert a["x"] + a["w"] <= 24, ta
        for tb, b in boxes[i + 1:]:
            apart = (a["x"] + a["w"] <= b["x"] or b["x"] + b["w"] <= a["x"]
                     or a["y"] + a["h"] <= b["y"] or b["y"] + b["h"] <= a["y"])
            assert apart, f"{ta!r} overlaps {tb!r}"


def test_dashboard_queries_only_exported_metrics(dashboard):
    exported = exported_names()
    used = set()
    for expr in exprs(dashboard):
        names = metric_names(expr)
        assert names, f"no metric in {expr}"
        used |= names
    unknown = {n for n in used if n not in exported and not n.startswith("node_")}
    assert not unknown, f"the dashboard queries metrics iotrace does not export: {sorted(unknown)}"
    # The panels the dashboard is for.
    assert {"iotrace_training_loop_seconds_total", "iotrace_gpu_idle_seconds_total", "iotrace_findings",
            "iotrace_syscall_io_latency_seconds_bucket", "iotrace_block_io_latency_seconds_bucket",
            "iotrace_read_bytes_total", "iotrace_written_bytes_total", "node_disk_read_bytes_total",
            "node_disk_io_time_seconds_total",
            # iotrace's own health: its numbers undercount when these are not 0, and its cost
            "iotrace_events_lost_total", "iotrace_self_map_full_drops_total",
            "iotrace_self_bpf_run_seconds_total", "iotrace_self_bpf_stats_seconds_total",
            "iotrace_self_cpu_seconds_total"} <= used
    types = {p["type"] for p in panels(dashboard)}
    assert {"heatmap", "timeseries", "stat", "table"} <= types
    # node_exporter's panels select the same devices as iotrace's (joined on `device`).
    for expr in exprs(dashboard):
        if "node_disk_" in expr:
            assert 'device=~"$device"' in expr, expr


@needs_promtool
def test_dashboard_promql_parses(dashboard, tmp_path):
    """promtool parses every query (as recording rules, with Grafana's variables filled in)."""
    rules = []
    for i, expr in enumerate(exprs(dashboard)):
        filled = re.sub(r"\$(\w+)", lambda m: GRAFANA_VARS.get(m.group(1), m.group(0)), expr)
        rules.append({"record": f"dashboard:expr_{i}", "expr": filled})
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    r = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture(scope="module")
def k8s() -> dict[str, dict]:
    docs = [d for d in yaml.safe_load_all(DAEMONSET.read_text()) if d]
    return {d["kind"]: d for d in docs}


def test_daemonset(k8s):
    ds = k8s["DaemonSet"]
    pod = ds["spec"]["template"]
    spec = pod["spec"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert spec["hostPID"] is True
    (c,) = spec["containers"]
    assert c["securityContext"]["privileged"] is True
    argv = c["command"] + c["args"]
    assert argv[0] == "iotrace"
    for flag in ("--auto", "--no-tui", "--prometheus", "-o"):
        assert flag in argv, flag
    host, port = parse_listen(argv[argv.index("--prometheus") + 1])
    assert host == "0.0.0.0"  # reachable from Prometheus, not only from the pod
    assert port == DEFAULT_PORT
    (cport,) = c["ports"]
    assert cport["containerPort"] == port
    ann = pod["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true"
    assert int(ann["prometheus.io/port"]) == port
    assert ann["prometheus.io/path"] == "/metrics"
    assert c["readinessProbe"]["httpGet"]["port"] in (cport["name"], port)
    res = c["resources"]
    assert res["requests"]["cpu"] and res["requests"]["memory"]
    assert res["limits"]["cpu"] and res["limits"]["memory"]
    assert any(t.get("key") == "nvidia.com/gpu" for t in spec["tolerations"])
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_daemonset_mounts(k8s):
    spec = k8s["DaemonSet"]["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    mounts = {host_paths[m["name"]]: m for m in c["volumeMounts"] if m["name"] in host_paths}
    assert mounts["/sys/kernel/btf"].get("readOnly") is True
    assert mounts["/sys/kernel/btf"]["mountPath"] == "/sys/kernel/btf"
    # --auto's classic syscall tracepoints are attached by their ids in tracefs (loader.py)
    assert mounts["/sys/kernel/tracing"].get("readOnly") is True
    assert mounts["/sys/kernel/tracing"]["mountPath"] == "/sys/kernel/tracing"
    assert mounts["/sys/fs/cgroup"].get("readOnly") is True
    # What the image needs, as tests/test_kernel_container.py and docs/container.md run it, and
    # nothing else: hostPID gives /proc, and iotrace pins nothing in bpffs.
    assert set(mounts) == {"/sys/kernel/btf", "/sys/kernel/tracing", "/sys/fs/cgroup",
                           "/var/lib/iotrace"}
    assert all(m.get("readOnly") for p, m in mounts.items() if p != "/var/lib/iotrace")
    out = c["args"][c["args"].index("-o") + 1]
    assert any(out.startswith(m["mountPath"] + "/") for m in mounts.values()), "traces on a hostPath"


def test_service(k8s):
    svc, ds = k8s["Service"], k8s["DaemonSet"]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert svc["metadata"]["namespace"] == ds["metadata"]["namespace"]
    assert svc["spec"]["selector"].items() <= labels.items()
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    (cport,) = c["ports"]
    (sport,) = svc["spec"]["ports"]
    assert sport["port"] == cport["containerPort"]
    assert sport["targetPort"] in (cport["name"], cport["containerPort"])


def test_prometheus_scrape_example(tmp_path):
    conf = yaml.safe_load(PROMETHEUS_YML.read_text())
    jobs = {j["job_name"]: j for j in conf["scrape_configs"]}
    targets = [t for sc in jobs["iotrace"]["static_configs"] for t in sc["targets"]]
    assert targets and all(t.endswith(f":{DEFAULT_PORT}") for t in targets)
    if shutil.which("promtool"):
        # Debian's promtool is built without Kubernetes discovery: check the static part.
        conf["scrape_configs"] = [j for j in conf["scrape_configs"] if "kubernetes_sd_configs" not in j]
        path = tmp_path / "prometheus.yml"
        path.write_text(yaml.safe_dump(conf))
        r = subprocess.run(["promtool", "check", "config", str(path)], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr


def test_docs_name_every_metric_and_the_port():
    text = DOC.read_text()
    assert str(DEFAULT_PORT) in text
    families = {s for s in exported_names() if s.startswith("iotrace_")}
    families = {re.sub(r"_(bucket|count|sum)$", "", s) for s in families}
    missing = sorted(f for f in families if f not in text)
    assert not missing, f"docs/prometheus.md does not describe {missing}"
