# SPDX-License-Identifier: Apache-2.0
"""Device tensors to host memory and back through pinned staging buffers
(docs/DESIGN.md, "Compiled graphs", "GPU tensors").

torch copies between a CUDA device and pageable host memory through a
bounce buffer of its own, several times slower than a copy to or from
page-locked ("pinned") memory. A ``Stage`` is one pinned buffer, reused: a
device tensor's bytes are copied into the next free span of it
(``to_host``) until the holder ``reset()``s it, once what it handed out
has been sent. It grows (to the next power of two) up to ``limit`` bytes
and never past it: a tensor that does not fit takes torch's ordinary
pageable copy. ``to_device`` goes the other way through a second, per
thread, pinned buffer that is free again as soon as the copy returns.

Every CUDA branch is behind ``torch.cuda.is_available()``; without torch,
without CUDA, or for CPU tensors nothing here allocates anything, and
tensors on another accelerator take torch's own copies. Imports torch only
when given a tensor (whoever calls has it imported). Not thread-safe: one
Stage per thread (``host_stage()``).
"""

import sys
import threading

STAGING_MAX = 256 << 20  # bytes one thread keeps pinned for device->host copies
UPLOAD_MAX = 256 << 20  # and for host->device ones
_ALIGN = 64

_local = threading.local()


def _cuda_ready(torch):
    try:
        return torch.cuda.is_available()
    except Exception:
        return False


def _pow2(n):
    return 1 << max(0, n - 1).bit_length()


class Stage:
    """One pinned host buffer handed out in spans until reset()."""

    def __init__(self, limit=STAGING_MAX):
        self.limit = limit
        self.buf = None  # a pinned uint8 torch tensor, made on first use
        self.off = 0
        self.staged = 0  # tensors copied through it (for tests and benches)

    def reset(self):
        """What was handed out is no longer read: its spans are free."""
        self.off = 0

    def span(self, nbytes):
        """A pinned uint8 tensor of nbytes, or None when it would pass the
        limit. A larger buffer replaces the old one; spans handed out of the
        old one keep it alive while they live."""
        import torch

        end = self.off + nbytes
        if end > self.limit:
            return None
        if self.buf is None or end > self.buf.numel():
            self.buf = torch.empty(min(self.limit, _pow2(max(end, 1 << 20))), dtype=torch.uint8, pin_memory=True)
            self.off, end = 0, nbytes
        out = self.buf[self.off : end]
        self.off = (end + _ALIGN - 1) // _ALIGN * _ALIGN
        return out

    def to_host(self, t):
        """A contiguous CPU tensor with t's values: t itself if it is on the
        CPU and contiguous; a span of this buffer for a CUDA tensor that
        fits; torch's own copy otherwise."""
        if t.device.type == "cpu":
            return t.contiguous()
        torch = sys.modules["torch"]
        if t.device.type != "cuda" or not _cuda_ready(torch):
            return t.cpu()
        nbytes = t.numel() * t.element_size()
        dst = self.span(nbytes) if nbytes else None
        if dst is None:
            return t.cpu()
        dst = dst.view(t.dtype).view(t.shape)
        dst.copy_(t, non_blocking=True)
        torch.cuda.current_stream(t.device).synchronize()
        self.staged += 1
        return dst


def host_stage():
    """This thread's Stage for device->host copies."""
    stage = getattr(_local, "stage", None)
    if stage is None:
        stage = _local.stage = Stage()
    return stage


def to_device(host, device):
    """host (a CPU tensor, possibly over read-only memory, which is only
    read) on ``device`` (a torch.device or its name): through this thread's
    pinned upload buffer for CUDA when it fits, else torch's own copy. The
    result shares no memory with host."""
    torch = sys.modules["torch"]
    device = torch.device(device)
    if device.type != "cuda" or not _cuda_ready(torch):
        return host.to(device)
    nbytes = host.numel() * host.element_size()
    up = getattr(_local, "upload", None)
    if up is None:
        up = _local.upload = Stage(UPLOAD_MAX)
    up.reset()
    span = up.span(nbytes) if nbytes else None
    if span is None:
        return host.to(device)
    span = span.view(host.dtype).view(host.shape)
    span.copy_(host)
    out = span.to(device, non_blocking=True)
    torch.cuda.current_stream(out.device).synchronize()  # the span is free again once this returns
    return out
