"""The data of `dense_resource` attributes (how torch-mlir's importer stores
tensor constants and frozen weights): the blobs in the module's
`dialect_resources` section, read once from its printed form (the Python
bindings give no other way to them)."""

from __future__ import annotations

import re

import numpy as np

from ..dialect import operation_text

_BLOB = re.compile(r'([\w.\-]+): "0x([0-9A-Fa-f]*)"')


def resource_key(attribute) -> str | None:
    """The blob name of a dense_resource attribute (None for any other)."""
    text = str(attribute)
    if not text.startswith("dense_resource<"):
        return None
    return text.split("<", 1)[1].split(">", 1)[0]


def resource_blobs(module) -> dict[str, bytes]:
    """{name: blob} of every resource in `module` (an ir.Module or its operation)."""
    text = operation_text(module, large_elements_limit=None)
    section = text.split("dialect_resources:", 1)[1] if "dialect_resources:" in text else ""
    return {name: bytes.fromhex(data) for name, data in _BLOB.findall(section)}


def blob_array(blob: bytes, dtype) -> np.ndarray:
    """A blob's elements (its first 4 bytes hold its alignment)."""
    return np.frombuffer(blob[4:], dtype=dtype)
