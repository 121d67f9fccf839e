"""Host-side logic of the CUDA backend that needs no GPU (CI runs it): buffer lifetimes."""

from __future__ import annotations


def test_cuda_buffer_defers_its_free():
    """Without a GPU: a dead pool buffer puts its block on the backend's list (no context
    needed on whatever thread collects it), and the backend frees the list's blocks (with
    its context current, at its next allocation or synchronize); foreign buffers free nothing."""
    import gc
    import threading

    from hal.backends.cuda import CudaBackend, CudaBuffer

    class Block:
        freed = 0

        def free(self) -> None:
            self.freed += 1

    freed_list: list[object] = []
    blocks = [Block() for _ in range(3)]
    bufs = [CudaBuffer(0x1000 * (i + 1), 256, b, freed_list) for i, b in enumerate(blocks)]
    foreign = CudaBuffer(0x9000, 64, object())  # wrap(): keeps its owner alive, frees nothing
    del foreign
    worker = threading.Thread(target=bufs.pop)  # collected on another thread
    worker.start()
    worker.join()
    del bufs
    gc.collect()
    assert sorted(map(id, freed_list)) == sorted(map(id, blocks)) and all(b.freed == 0 for b in blocks)
    backend = CudaBackend.__new__(CudaBackend)
    backend._freed = freed_list
    backend._return_freed()
    assert freed_list == [] and all(b.freed == 1 for b in blocks)
