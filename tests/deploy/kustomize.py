"""A small kustomize renderer for the manifests in deploy/k8s, so `make test` can render and
validate the overlays on machines without kubectl.

It implements exactly the kustomization fields those files use, in kustomize's order
(resources, then patches, namespace, replicas, images) and refuses any other field, so a
kustomization that grows a feature this renderer lacks fails loudly instead of rendering wrong.
Where kubectl is installed, a test compares this renderer's output with ``kubectl kustomize``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterable, Optional

import yaml

Doc = dict[str, Any]

SUPPORTED_FIELDS = frozenset({"apiVersion", "kind", "resources", "namespace", "replicas", "images", "patches"})
CLUSTER_SCOPED_KINDS = frozenset({"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume",
                                  "StorageClass", "CustomResourceDefinition", "PriorityClass"})
#: list fields that strategic merge patches merge element-wise by a key (others are replaced)
MERGE_KEYS = {"containers": "name", "initContainers": "name", "volumes": "name", "volumeMounts": "mountPath",
              "env": "name"}
POD_SPEC_PATHS = (("spec", "template", "spec"), ("spec", "jobTemplate", "spec", "template", "spec"))


class KustomizeError(ValueError):
    """The kustomization uses something this renderer does not implement, or refers to nothing."""


def render(directory: Path) -> list[Doc]:
    """The resources ``kubectl kustomize DIRECTORY`` would print (order aside)."""
    kustomization_file = directory / "kustomization.yaml"
    if not kustomization_file.is_file():
        raise KustomizeError(f"{directory}: no kustomization.yaml")
    spec = yaml.safe_load(kustomization_file.read_text()) or {}
    unknown = set(spec) - SUPPORTED_FIELDS
    if unknown:
        raise KustomizeError(f"{kustomization_file}: fields {sorted(unknown)} are not implemented here")

    docs: list[Doc] = []
    for entry in spec.get("resources", []):
        path = (directory / entry).resolve()
        if path.is_dir():
            docs.extend(render(path))
        elif path.is_file():
            docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
        else:
            raise KustomizeError(f"{kustomization_file}: resource {entry} does not exist")
    _check_unique(docs, kustomization_file)

    for patch in spec.get("patches", []):
        _apply_patch(docs, patch, directory)
    if "namespace" in spec:
        for doc in docs:
            if doc["kind"] not in CLUSTER_SCOPED_KINDS:
                doc.setdefault("metadata", {})["namespace"] = spec["namespace"]
            if doc["kind"] in ("RoleBinding", "ClusterRoleBinding"):  # as kustomize: ServiceAccount subjects follow
                for subject in doc.get("subjects", []):
                    if subject.get("kind") == "ServiceAccount":
                        subject["namespace"] = spec["namespace"]
    for replica in spec.get("replicas", []):
        target = _one(docs, lambda d: d["metadata"]["name"] == replica["name"] and "replicas" in d.get("spec", {}),
                      f"replicas entry {replica['name']}")
        target["spec"]["replicas"] = replica["count"]
    for image in spec.get("images", []):
        for doc in docs:
            _retag(doc, image)
    return docs


def key(doc: Doc) -> tuple[str, str, str]:
    """Identity of a resource: kind, namespace, name."""
    meta = doc.get("metadata", {})
    return doc["kind"], meta.get("namespace", ""), meta["name"]


def containers(doc: Doc) -> Iterable[Doc]:
    """Every container and init container of a workload resource."""
    for path in POD_SPEC_PATHS:
        node: Any = doc
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            yield from node.get("initContainers", [])
            yield from node.get("containers", [])


# ------------------------------------------------------------------------------------ internals


def _check_unique(docs: list[Doc], where: Path) -> None:
    seen: set[tuple[str, str, str]] = set()
    for doc in docs:
        if key(doc) in seen:
            raise KustomizeError(f"{where}: {key(doc)} is defined twice")
        seen.add(key(doc))


def _one(docs: list[Doc], match: Any, what: str) -> Doc:
    found = [d for d in docs if match(d)]
    if len(found) != 1:
        raise KustomizeError(f"{what} matches {len(found)} resources, expected 1")
    return found[0]


def _apply_patch(docs: list[Doc], patch: Doc, directory: Path) -> None:
    unknown = set(patch) - {"path", "patch", "target"}
    if unknown:
        raise KustomizeError(f"patch fields {sorted(unknown)} are not implemented here")
    text = (directory / patch["path"]).read_text() if "path" in patch else patch["patch"]
    body = yaml.safe_load(text)
    target_spec: Optional[Doc] = patch.get("target")
    if isinstance(body, list):  # RFC 6902 operations
        if not target_spec:
            raise KustomizeError(f"JSON6902 patch {patch.get('path', '<inline>')} needs a target")
        target = _one(docs, lambda d: _matches(d, target_spec), f"patch target {target_spec}")
        for op in body:
            _json6902(target, op)
        return
    if target_spec is None:
        target_spec = {"kind": body["kind"], "name": body["metadata"]["name"]}
    target = _one(docs, lambda d: _matches(d, target_spec), f"patch target {target_spec}")
    merged = _strategic_merge(target, body)
    target.clear()
    target.update(merged)


def _matches(doc: Doc, target: Doc) -> bool:
    unknown = set(target) - {"kind", "name"}
    if unknown:
        raise KustomizeError(f"patch target fields {sorted(unknown)} are not implemented here")
    return doc["kind"] == target.get("kind", doc["kind"]) and doc["metadata"]["name"] == target.get("name")


def _strategic_merge(base: Any, patch: Any, field: str = "") -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = copy.deepcopy(base)
        for name, value in patch.items():
            if value is None:
                out.pop(name, None)
            elif name in out:
                out[name] = _strategic_merge(out[name], value, name)
            else:
                out[name] = copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(patch, list) and field in MERGE_KEYS:
        merge_key = MERGE_KEYS[field]
        out = copy.deepcopy(base)
        for item in patch:
            index = next((i for i, old in enumerate(out) if old.get(merge_key) == item.get(merge_key)), None)
            if index is None:
                out.append(copy.deepcopy(item))
            else:
                out[index] = _strategic_merge(out[index], item)
        return out
    return copy.deepcopy(patch)


def _json6902(doc: Doc, op: Doc) -> None:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
    parent: Any = doc
    for part in parts[:-1]:
        parent = parent[int(part)] if isinstance(parent, list) else parent[part]
    last = parts[-1]
    if op["op"] == "remove":
        if isinstance(parent, list):
            del parent[int(last)]
        elif last in parent:
            del parent[last]
        else:
            raise KustomizeError(f"remove {op['path']}: no such field")
    elif op["op"] in ("replace", "add"):
        if op["op"] == "replace" and not isinstance(parent, list) and last not in parent:
            raise KustomizeError(f"replace {op['path']}: no such field")
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if op["op"] == "add":
                parent.insert(index, copy.deepcopy(op["value"]))
            else:
                parent[index] = copy.deepcopy(op["value"])
        else:
            parent[last] = copy.deepcopy(op["value"])
    else:
        raise KustomizeError(f"JSON6902 op {op['op']!r} is not implemented here")


def _retag(doc: Doc, image: Doc) -> None:
    for container in containers(doc):
        ref = container.get("image", "")
        name, tag = _split_image(ref)
        if name != image["name"]:
            continue
        name = image.get("newName", name)
        tag = image.get("newTag", tag)
        container["image"] = f"{name}:{tag}" if tag else name


def _split_image(ref: str) -> tuple[str, str]:
    """``repo/name:tag`` -> (``repo/name``, ``tag``); a port in the registry host is not a tag."""
    head, sep, tail = ref.rpartition(":")
    if sep and "/" not in tail:
        return head, tail
    return ref, ""
