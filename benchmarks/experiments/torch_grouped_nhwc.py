"""Where PyTorch spends its time on one conv case, step by step (sessions 25 and 26: the float32
whole-table runs stalled for over 100 s inside ``conv3x3 g32 64x128x56x56 nhwc`` after hal's own
timing). Each step prints its wall time as it ends, so a step limit that cuts the run still
shows which one stalled: the first call (cuDNN's algorithm search with ``cudnn.benchmark``), one
synchronized call, 20 calls back to back, a CUDA graph capture and replay, then the same with
``cudnn.benchmark`` off.

    python3 benchmarks/experiments/torch_grouped_nhwc.py [--dtype float32] [--layout nhwc] [--groups 32]
"""

from __future__ import annotations

import argparse
import time


def main() -> int:
    """Time the case's PyTorch steps one by one."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--layout", default="nhwc")
    ap.add_argument("--groups", type=int, default=32)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dt = getattr(torch, args.dtype)
    fmt = torch.channels_last if args.layout == "nhwc" else torch.contiguous_format
    x = torch.randn(64, 128, 56, 56, device="cuda", dtype=dt).contiguous(memory_format=fmt)
    w = torch.randn(128, 128 // args.groups, 3, 3, device="cuda", dtype=dt).contiguous(memory_format=fmt)
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}; "
          f"{args.dtype} {args.layout} groups {args.groups}", flush=True)

    def conv() -> torch.Tensor:
        return F.conv2d(x, w, None, 1, 1, 1, args.groups)

    def step(name: str, fn) -> None:  # type: ignore[no-untyped-def]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        print(f"{name:42s} {1e3 * (time.perf_counter() - t0):10.2f} ms wall", flush=True)

    for bench in (True, False):
        torch.backends.cudnn.benchmark = bench
        print(f"cudnn.benchmark = {bench}", flush=True)
        step("  first call", conv)
        step("  one call", conv)
        step("  20 calls back to back", lambda: [conv() for _ in range(20)])
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            conv()
        torch.cuda.current_stream().wait_stream(stream)

        def capture(graph: torch.cuda.CUDAGraph = graph) -> None:
            with torch.cuda.graph(graph):
                for _ in range(20):
                    conv()

        step("  graph capture of 20 calls", capture)
        step("  graph replay", graph.replay)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
