"""Kubernetes LabelSelector matching (matchLabels AND matchExpressions), as apimachinery defines it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class SelectorError(ValueError):
    """A selector that cannot be evaluated (unknown operator, missing values)."""


def matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """True if `labels` satisfy `selector`. An empty or missing selector matches nothing here:
    a placement must never capture every pod of a namespace by accident (the CRD forbids it too)."""
    if not selector:
        return False
    labels = labels or {}
    match_labels = selector.get("matchLabels") or {}
    exprs = selector.get("matchExpressions") or []
    if not match_labels and not exprs:
        return False
    for k, v in match_labels.items():
        if labels.get(k) != v:
            return False
    for e in exprs:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In":
            if key not in labels or labels[key] not in values:
                return False
        elif op == "NotIn":
            if key in labels and labels[key] in values:
                return False
        elif op == "Exists":
            if key not in labels:
                return False
        elif op == "DoesNotExist":
            if key in labels:
                return False
        else:
            raise SelectorError(f"unknown selector operator {op!r}")
    return True
