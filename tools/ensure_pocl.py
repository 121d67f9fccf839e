"""Make sure this machine has a PoCL that builds kernels (the CPU OpenCL driver the tests run on).

``make``'s environment step runs this after installing the project. PyPI's PoCL
(``pocl-binary-distribution``, PoCL 3.0 on LLVM 14) lists its device on a host CPU its LLVM
does not know (AMD Zen 5) and then fails every build with "unknown target CPU 'generic'";
hal leaves such a device out (``backends/opencl.py``, ``_pocl_cannot_build``). When no PoCL
device can build, this installs Debian's PoCL (``apt-get install pocl-opencl-icd``, LLVM 15)
where it runs as root with apt-get, else says what to install and fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

CHECK = (
    "import hal\n"
    "from hal.backends.opencl import is_pocl_platform\n"
    "s = {b.name: b for b in hal.backend_status()}['opencl']\n"
    "ok = s.available and any(is_pocl_platform(i.platform) for i in s.devices)\n"
    "print(s.reason)\n"
    "raise SystemExit(0 if ok else 1)\n"
)


def pocl_builds() -> tuple[bool, str]:
    """(whether a PoCL device builds kernels, the OpenCL backend's status line), in a fresh process."""
    run = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, check=False)
    lines = (run.stdout + run.stderr).strip().splitlines()
    return run.returncode == 0, lines[-1] if lines else ""


def main() -> int:
    ok, status = pocl_builds()
    if ok:
        return 0
    print(f"ensure_pocl: no PoCL device builds kernels here ({status})")
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        print("ensure_pocl: install a PoCL that knows this CPU (Debian/Ubuntu: apt-get install pocl-opencl-icd) "
              "and run make again")
        return 1
    print("ensure_pocl: installing Debian's PoCL (apt-get install pocl-opencl-icd)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "pocl-opencl-icd"]):
        if subprocess.run(cmd, env=env, check=False, stdout=subprocess.DEVNULL).returncode:
            print(f"ensure_pocl: {' '.join(cmd)} failed")
            return 1
    ok, status = pocl_builds()
    verdict = "a PoCL device builds kernels now" if ok else "still no PoCL device builds kernels"
    print(f"ensure_pocl: {verdict} ({status})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
