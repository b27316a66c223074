"""Peak tensor memory of a block of code, from torch's own allocator events (not process RSS, which counts imports).

``torch.profiler`` with ``profile_memory=True`` records every allocation and free made through torch's allocators,
kernel-internal temporaries included. :class:`PeakTensorMemory` replays them in time order and reports the largest
number of bytes allocated inside the block and not yet freed (memory that was live before the block is not
counted, and freeing it does not lower the figure). On CUDA, ``torch.cuda.max_memory_allocated`` gives the same
figure more cheaply; this is its stand-in for CPU runs.

    with PeakTensorMemory() as mem:
        run()
    print(mem.peak_bytes)
"""

from __future__ import annotations


class PeakTensorMemory:
    """Context manager; after exit, ``peak_bytes`` (and ``peak_mib``) hold the block's peak of live allocations."""

    def __init__(self, device: str = "cpu"):
        self.device = device
        self.peak_bytes = 0

    def __enter__(self):
        from torch.profiler import ProfilerActivity, profile

        self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self._prof.__enter__()
        return self

    def __exit__(self, *exc):
        from torch._C._profiler import _EventType

        self._prof.__exit__(*exc)
        events = []
        stack = list(self._prof.profiler.kineto_results.experimental_event_tree())
        while stack:
            ev = stack.pop()
            stack.extend(ev.children)
            if ev.tag == _EventType.Allocation:
                f = ev.extra_fields
                if str(f.device).split(":")[0] == self.device:
                    events.append((ev.start_time_ns, f.ptr, f.alloc_size))
        events.sort(key=lambda x: x[0])
        live, cur, peak = {}, 0, 0
        for _, ptr, size in events:
            if size > 0:
                live[ptr] = size
                cur += size
                peak = max(peak, cur)
            elif ptr in live:  # frees of memory allocated before the block are ignored
                cur -= live.pop(ptr)
        self.peak_bytes = peak
        return False

    @property
    def peak_mib(self) -> float:
        return self.peak_bytes / 2**20
