#!/usr/bin/env bash
# k8s.sh REPO [MOED]: deploy/k8s builds what its comments say, without kubectl or a cluster.
# Every YAML file parses; each kustomization (base, overlays/*) is rendered here by a small
# kustomize subset (resources, components, configMapGenerator replace, JSON 6902 patches,
# images) that refuses any field it does not implement; then:
#   - the base has no PersistentVolumeClaim and mounts no claim; reports are on an emptyDir
#     and the workers stay after mpirun (cleanPodPolicy: None) so the report can be copied;
#   - overlays/weights-claim mounts exactly one claim, read-only at /models, and its config
#     reads the weights from there; overlays/reports-claim mounts exactly one claim, at the
#     ranks' working directory; no kustomization makes a claim;
#   - in every rendering: the config mpirun names is a key of the ConfigMap, every mount has
#     a volume, -np = workers x slots, and (with MOED) the config passes --check-config.
# Exit 77 (skipped) without python3's yaml module (apt-get install python3-yaml).
set -euo pipefail
REPO=${1:?usage: k8s.sh REPO [MOED]}
MOED=${2:-${MOED:-}}
python3 -c 'import yaml' 2>/dev/null || { echo "SKIP: python3 yaml module missing"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec python3 - "$REPO" "$MOED" <<'PY'
import copy, glob, os, subprocess, sys, tempfile
import yaml

repo, moed = sys.argv[1], sys.argv[2]
k8s = os.path.join(repo, "deploy", "k8s")
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


# --- every YAML file parses -------------------------------------------------------------
files = sorted(glob.glob(os.path.join(k8s, "**", "*.yaml"), recursive=True))
for p in files:
    try:
        load_all(p)
    except yaml.YAMLError as e:
        fail(f"{p}: {e}")


# --- JSON patch (RFC 6902): test, add, replace, remove ----------------------------------
def pointer(path):
    return [t.replace("~1", "/").replace("~0", "~") for t in path.split("/")[1:]]


def parent_of(doc, toks):
    for t in toks[:-1]:
        doc = doc[int(t)] if isinstance(doc, list) else doc[t]
    return doc, toks[-1]


def json_patch(doc, ops, where):
    for op in ops:
        par, last = parent_of(doc, pointer(op["path"]))
        kind = op["op"]
        if isinstance(par, list):
            idx = len(par) if last == "-" else int(last)
            if kind == "add":
                par.insert(idx, copy.deepcopy(op["value"]))
            elif kind == "replace":
                par[idx] = copy.deepcopy(op["value"])
            elif kind == "remove":
                del par[idx]
            elif kind == "test":
                if par[idx] != op["value"]:
                    raise ValueError(f"{where}: test {op['path']} failed: {par[idx]!r}")
            else:
                raise ValueError(f"{where}: op {kind} not implemented here")
        else:
            if kind in ("add", "replace"):
                if kind == "replace" and last not in par:
                    raise ValueError(f"{where}: replace of missing {op['path']}")
                par[last] = copy.deepcopy(op["value"])
            elif kind == "remove":
                del par[last]
            elif kind == "test":
                if par.get(last) != op["value"]:
                    raise ValueError(f"{where}: test {op['path']} failed: {par.get(last)!r}")
            else:
                raise ValueError(f"{where}: op {kind} not implemented here")


# --- a kustomize subset ------------------------------------------------------------------
KNOWN = {"apiVersion", "kind", "resources", "components", "configMapGenerator", "patches",
         "images"}


def matches(doc, target):
    api = doc.get("apiVersion", "")
    group, _, version = api.rpartition("/")
    return (doc.get("kind") == target.get("kind", doc.get("kind"))
            and doc["metadata"]["name"] == target.get("name", doc["metadata"]["name"])
            and group == target.get("group", group)
            and version == target.get("version", version))


def render(d):
    kfile = os.path.join(d, "kustomization.yaml")
    (k,) = load_all(kfile)
    unknown = set(k) - KNOWN
    if unknown:
        raise ValueError(f"{kfile}: fields this test does not implement: {sorted(unknown)}")
    out = []
    for r in k.get("resources", []):
        p = os.path.normpath(os.path.join(d, r))
        out += render(p) if os.path.isdir(p) else load_all(p)
    for c in k.get("components", []):
        out = apply(os.path.normpath(os.path.join(d, c)), out, component=True)
    return apply(d, out, component=False, k=k)


def apply(d, docs, component, k=None):
    if component:
        kfile = os.path.join(d, "kustomization.yaml")
        (k,) = load_all(kfile)
        if k.get("kind") != "Component" or set(k) - KNOWN or "resources" in k:
            raise ValueError(f"{kfile}: not a Component of the implemented subset")
        for c in k.get("components", []):
            docs = apply(os.path.normpath(os.path.join(d, c)), docs, component=True)
    for g in k.get("configMapGenerator", []):
        if g.get("behavior") != "replace" or not g.get("options", {}).get("disableNameSuffixHash"):
            raise ValueError(f"{d}: a generator must replace and keep its name")
        hit = [x for x in docs if x["kind"] == "ConfigMap" and x["metadata"]["name"] == g["name"]]
        if len(hit) != 1:
            raise ValueError(f"{d}: generator {g['name']} replaces {len(hit)} ConfigMaps")
        data = {}
        for f in g["files"]:
            key, _, src = f.rpartition("=") if "=" in f else (os.path.basename(f), "", f)
            with open(os.path.join(d, src)) as fh:
                data[key] = fh.read()
        hit[0]["data"] = data
    for p in k.get("patches", []):
        with open(os.path.join(d, p["path"])) as fh:
            ops = yaml.safe_load(fh)
        hit = [x for x in docs if matches(x, p["target"])]
        if len(hit) != 1:
            raise ValueError(f"{d}: patch {p['path']} matches {len(hit)} resources")
        json_patch(hit[0], ops, os.path.join(d, p["path"]))
    for im in k.get("images", []):
        for x in docs:
            for spec in pod_specs(x):
                for c in spec.get("containers", []):
                    name, _, tag = c["image"].rpartition(":")
                    if name == im["name"]:
                        c["image"] = f"{im.get('newName', name)}:{im.get('newTag', tag)}"
    return docs


def pod_specs(doc):
    if doc.get("kind") != "MPIJob":
        return []
    return [r["template"]["spec"] for r in doc["spec"]["mpiReplicaSpecs"].values()]


def claims(docs):
    """(replica, volume name, claim, readOnly) of every claim volume, and PVC objects."""
    vols = []
    for x in docs:
        if x.get("kind") == "MPIJob":
            for role, r in x["spec"]["mpiReplicaSpecs"].items():
                for v in r["template"]["spec"].get("volumes", []):
                    if "persistentVolumeClaim" in v:
                        pvc = v["persistentVolumeClaim"]
                        vols.append((role, v["name"], pvc["claimName"], pvc.get("readOnly", False)))
    pvcs = [x["metadata"]["name"] for x in docs if x.get("kind") == "PersistentVolumeClaim"]
    return vols, pvcs


def common_checks(name, docs):
    jobs = [x for x in docs if x.get("kind") == "MPIJob"]
    cms = {x["metadata"]["name"]: x for x in docs if x.get("kind") == "ConfigMap"}
    if len(jobs) != 1:
        fail(f"{name}: {len(jobs)} MPIJobs")
        return None
    job = jobs[0]
    spec = job["spec"]
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    worker = spec["mpiReplicaSpecs"]["Worker"]
    wspec = worker["template"]["spec"]
    args = launcher["args"]
    np_ = int(args[args.index("-np") + 1])
    if np_ != worker["replicas"] * spec.get("slotsPerWorker", 1):
        fail(f"{name}: -np {np_} != Worker replicas x slotsPerWorker")
    vols = {v["name"]: v for v in wspec.get("volumes", [])}
    mounts = {m["name"]: m for m in wspec["containers"][0].get("volumeMounts", [])}
    for m in mounts:
        if m not in vols:
            fail(f"{name}: worker mount {m} has no volume")
    for v in vols:
        if v not in mounts:
            fail(f"{name}: worker volume {v} is not mounted")
    cfg_path = args[args.index("--config") + 1]
    cfg_mount = mounts.get("config")
    cm_name = vols.get("config", {}).get("configMap", {}).get("name")
    if cfg_mount is None or cm_name not in cms:
        fail(f"{name}: the config volume or its ConfigMap is missing")
        return None
    key = os.path.relpath(cfg_path, cfg_mount["mountPath"])
    text = cms[cm_name].get("data", {}).get(key)
    if text is None:
        fail(f"{name}: mpirun reads {cfg_path}, but ConfigMap {cm_name} has no key {key}")
        return None
    if "--wdir" in args and mounts.get("reports", {}).get("mountPath") != args[args.index("--wdir") + 1]:
        fail(f"{name}: the ranks' working directory is not the reports volume")
    if moed:
        # --check-config also opens model.weights; a checkpoint on a claim only the pods mount
        # is not on this machine, so the rest of the config is checked with random weights.
        checked = yaml.safe_load(text) or {}
        weights = str((checked.get("model") or {}).get("weights", "random"))
        if any(weights.startswith(m["mountPath"].rstrip("/") + "/") for m in mounts.values()):
            checked["model"]["weights"] = "random"
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(yaml.safe_dump(checked))
        r = subprocess.run([moed, "--config", f.name, "--check-config", "--ranks", str(np_)],
                           capture_output=True, text=True)
        os.unlink(f.name)
        if r.returncode != 0:
            fail(f"{name}: its config fails --check-config: {r.stderr.strip()}")
    return job, wspec, vols, mounts, yaml.safe_load(text)


# --- no kustomization makes a claim -----------------------------------------------------
for kf in glob.glob(os.path.join(k8s, "**", "kustomization.yaml"), recursive=True):
    (k,) = load_all(kf)
    for r in k.get("resources", []):
        p = os.path.normpath(os.path.join(os.path.dirname(kf), r))
        if os.path.isfile(p) and any(d.get("kind") == "PersistentVolumeClaim" for d in load_all(p)):
            fail(f"{kf}: lists {r}, which makes a PersistentVolumeClaim")

# --- base ---------------------------------------------------------------------------------
try:
    base = render(os.path.join(k8s, "base"))
except (ValueError, KeyError, OSError) as e:
    fail(f"base: cannot render: {e}")
    base = None
if base is not None:
    vols, pvcs = claims(base)
    if vols or pvcs:
        fail(f"base: claims {vols} PVCs {pvcs}; the base must run without storage")
    got = common_checks("base", base)
    if got:
        job, wspec, v, m, cfg = got
        if "emptyDir" not in v.get("reports", {}):
            fail("base: reports are not on an emptyDir")
        if job["spec"]["runPolicy"].get("cleanPodPolicy") != "None":
            fail("base: the workers (and the report on worker 0's emptyDir) go when mpirun ends")
        if cfg["model"].get("weights", "random") != "random":
            fail("base: the config reads a weights file")
    cm = [x for x in base if x.get("kind") == "ConfigMap"][0]
    with open(os.path.join(repo, "configs", "experts.yaml")) as f:
        if cm["data"].get("moed.yaml") != f.read():
            fail("base/configmap.yaml is not a verbatim copy of configs/experts.yaml "
                 "(regenerate it: see its comment)")

# --- overlays ----------------------------------------------------------------------------
expect = {
    "weights-claim": ("weights", "/models", True),
    "reports-claim": ("reports", "/var/lib/moed", False),
}
found = sorted(os.path.basename(p) for p in glob.glob(os.path.join(k8s, "overlays", "*")))
if found != sorted(expect):
    fail(f"overlays: {found}, this test knows {sorted(expect)}")
for name, (vol, path, ro) in expect.items():
    try:
        docs = render(os.path.join(k8s, "overlays", name))
    except (ValueError, KeyError, OSError) as e:
        fail(f"overlays/{name}: cannot render: {e}")
        continue
    vols, pvcs = claims(docs)
    if pvcs:
        fail(f"overlays/{name}: makes claims {pvcs}; it should only mount one the user made")
    if [(r, n) for r, n, _, _ in vols] != [("Worker", vol)]:
        fail(f"overlays/{name}: claim volumes {vols}, want only the workers' {vol}")
    elif vols[0][3] != ro:
        fail(f"overlays/{name}: claim readOnly is {vols[0][3]}, want {ro}")
    got = common_checks(f"overlays/{name}", docs)
    if not got:
        continue
    job, wspec, v, m, cfg = got
    if m.get(vol, {}).get("mountPath") != path or bool(m.get(vol, {}).get("readOnly")) != ro:
        fail(f"overlays/{name}: {vol} is not mounted at {path} (readOnly {ro})")
    weights = cfg["model"].get("weights", "random")
    if name == "weights-claim" and not weights.startswith(path + "/"):
        fail(f"overlays/{name}: model.weights is {weights}, not a file under {path}")
    if name == "reports-claim" and job["spec"]["runPolicy"].get("cleanPodPolicy") != "Running":
        fail(f"overlays/{name}: the workers stay after mpirun although the report is on a claim")

# --- components/same-node keeps the workers together ------------------------------------
try:
    docs = apply(os.path.join(k8s, "components", "same-node"),
                 render(os.path.join(k8s, "base")), component=True)
    worker = [x for x in docs if x.get("kind") == "MPIJob"][0]["spec"]["mpiReplicaSpecs"]["Worker"]
    aff = worker["template"]["spec"].get("affinity", {})
    term = aff["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    labels = worker["template"]["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in term["labelSelector"]["matchLabels"].items()):
        fail("components/same-node: its selector does not match the workers' labels")
except (ValueError, KeyError, OSError, IndexError) as e:
    fail(f"components/same-node: {e}")

if failures:
    sys.exit(1)
print(f"PASS: {len(files)} YAML files; base and {len(expect)} overlays rendered and checked")
PY
