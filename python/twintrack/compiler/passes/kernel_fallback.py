"""A fast path never fails a compile: a kernel pass builds each site's
kernel inside `kernel_site`. Where a generator fails to build or verify its
kernel (a compiler bug, `KernelBuildError`), the site stays as it was, for
the generic path, and the failure is recorded on the module
(`FALLBACKS_ATTR`: kernel -> message): the driver warns, and the artifact
keeps a reproducer (OUTDIR/repro/). With `strict` (--strict-kernels, as the
tests run) the failure is the compile's error instead."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from mlir import ir

from ..kernels.builder import KernelBuildError
from ...locations import short_location

FALLBACKS_ATTR = "twintrack.kernel_fallbacks"
REFUSALS_ATTR = "twintrack.kernel_refusals"  # torch op -> why no fast path took it
SCHEDULES_ATTR = "twintrack.kernel_schedules"  # torch op and kernel -> its schedule and the reasons, one a line


@contextlib.contextmanager
def kernel_site(module: ir.Operation, strict: bool) -> Iterator[None]:
    """Build one site's kernel; on a KernelBuildError, record it and go on (or raise, when `strict`)."""
    try:
        yield
    except KernelBuildError as error:
        if strict:
            raise
        record_fallback(module, error.kernel, str(error))


def record_fallback(module: ir.Operation, kernel: str, message: str) -> None:
    recorded = fallbacks(module)
    recorded[kernel] = message
    module.attributes[FALLBACKS_ATTR] = ir.DictAttr.get({k: ir.StringAttr.get(v) for k, v in recorded.items()})


def fallbacks(module: ir.Operation) -> dict[str, str]:
    """kernel -> why it fell back to the generic path, as recorded on the module."""
    return _strings(module, FALLBACKS_ATTR)


def record_refusal(module: ir.Operation, op: ir.Operation, reason: str) -> None:
    """Note why no fast-path generator takes `op` (it stays for the generic
    path): the driver adds it to the remarks --explain-fusion prints."""
    recorded = _strings(module, REFUSALS_ATTR)
    recorded[f"{short_location(op.location)} {op.name}"] = reason
    module.attributes[REFUSALS_ATTR] = ir.DictAttr.get({k: ir.StringAttr.get(v) for k, v in recorded.items()})


def record_schedule(module: ir.Operation, location: ir.Location, kernel: str, schedule: str,
                    reasons: tuple[str, ...]) -> None:
    """Note the schedule a CPU kernel generator chose for the op at
    `location`, and why: the driver keeps it for --explain-schedule."""
    recorded = _strings(module, SCHEDULES_ATTR)
    recorded[f"{short_location(location)} {kernel}"] = "\n".join((schedule, *reasons))
    module.attributes[SCHEDULES_ATTR] = ir.DictAttr.get({k: ir.StringAttr.get(v) for k, v in recorded.items()})


def take_records(module: ir.Operation) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(fallbacks, refusals, schedules) recorded on the module, removed from it."""
    records = fallbacks(module), _strings(module, REFUSALS_ATTR), _strings(module, SCHEDULES_ATTR)
    for name in (FALLBACKS_ATTR, REFUSALS_ATTR, SCHEDULES_ATTR):
        if name in module.attributes:
            del module.attributes[name]
    return records


def _strings(module: ir.Operation, name: str) -> dict[str, str]:
    if name not in module.attributes:
        return {}
    table = ir.DictAttr(module.attributes[name])
    return {table[i].name: ir.StringAttr(table[i].attr).value for i in range(len(table))}
