"""The package through a tuning-cache server: `tilejit serve` on 127.0.0.1, and
fresh Python processes with TILEJIT_SERVER set (the engine is made from the
settings when a process first calls tilejit, so each case is a process of its
own). The first process's kernels are compiled by the server; a second
process with an empty local store gets them from the server's store (no
compile anywhere); with the server gone, a third falls back to compiling in
process within its deadline. Every result is checked against float64.

The CLI is $TILEJIT_CLI, else `tilejit` on PATH, else the build tree's;
without it, torch or a GPU the test is skipped, saying why.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(HERE, "..")

try:
    import torch
    WHY = "" if torch.cuda.is_available() else "no CUDA device for torch"
except ImportError:
    torch = None
    WHY = "torch is not installed"


def _cli():
    for cand in (os.environ.get("TILEJIT_CLI"), shutil.which("tilejit"),
                 os.path.join(HERE, "..", "..", "build", "tools", "tilejit")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


CLI = _cli()

# One process of a training job: RMSNorm and a linear layer with a bias,
# each against float64, then where each kernel came from.
CHILD = r"""
import sys, torch, tilejit
torch.manual_seed(int(sys.argv[1]))
x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
y = tilejit.ops.rms_norm(x, w, 1e-5)
xd = x.double()
ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-5) * w.double()
err = ((y.double() - ref).abs() / (ref.abs() + 1)).max().item()
assert err < 2e-2, f"rms_norm off by {err}"
a = torch.randn(96, 256, device="cuda", dtype=torch.bfloat16)
lw = torch.randn(160, 256, device="cuda", dtype=torch.bfloat16)
bias = torch.randn(160, device="cuda", dtype=torch.bfloat16)
d = tilejit.ops.linear(a, lw, bias)
ref = a.double() @ lw.double().t() + bias.double()
err = ((d.double() - ref).abs() / (ref.abs() + 16)).max().item()
assert err < 2e-2, f"linear off by {err}"
torch.cuda.synchronize()
print(tilejit.explain("rms_norm", x, w))
print(tilejit.explain("linear", a, lw, bias))
"""


@unittest.skipUnless(torch is not None and not WHY and CLI, WHY or "no tilejit CLI "
                     "($TILEJIT_CLI, PATH or build/tools/tilejit)")
class ThroughAServer(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tilejit-remote-")
        self.log = []
        self.server = subprocess.Popen(
            [CLI, "serve", "--listen", "127.0.0.1:0", "--db", os.path.join(self.dir, "server.db")],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        deadline = time.time() + 30
        self.port = None
        while self.port is None and time.time() < deadline and self.server.poll() is None:
            for line in list(self.log):
                m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
            time.sleep(0.05)
        self.assertIsNotNone(self.port, "the server did not start: " + "".join(self.log))

    def _read(self):
        for line in self.server.stderr:
            self.log.append(line)

    def tearDown(self):
        if self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            self.server.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)

    def child(self, name, seed, server, deadline_ms=None):
        env = dict(os.environ)
        env.update(TILEJIT_SERVER=server, TILEJIT_CACHE_DIR=os.path.join(self.dir, name),
                   PYTHONPATH=PACKAGE + os.pathsep + env.get("PYTHONPATH", ""))
        if deadline_ms is not None:
            env["TILEJIT_SERVER_DEADLINE_MS"] = str(deadline_ms)
        r = subprocess.run([sys.executable, "-c", CHILD, str(seed)], env=env, text=True,
                           capture_output=True, timeout=300)
        self.assertEqual(r.returncode, 0, f"{name}: {r.stdout}\n{r.stderr}")
        return r.stdout

    def compiles(self):
        return sum(1 for line in list(self.log) if re.search(r"\bcompiled [0-9a-f]", line))

    def test_kernels_come_from_the_server_and_the_local_compile_is_the_fallback(self):
        address = f"127.0.0.1:{self.port}"
        out = self.child("first", 1, address)
        self.assertEqual(out.count(f"(from the server {address})"), 2, out)
        compiled = self.compiles()
        self.assertGreaterEqual(compiled, 2, "".join(self.log))

        # A second process with an empty local store: the same kernels, from
        # the server's store; nothing compiled there or here.
        out = self.child("second", 2, address)
        self.assertEqual(out.count(f"(from the server {address})"), 2, out)
        self.assertEqual(self.compiles(), compiled, "".join(self.log))

        # The server gone: a third compiles in process after its deadline.
        self.server.send_signal(signal.SIGTERM)
        self.server.wait(timeout=30)
        out = self.child("third", 3, address, deadline_ms=500)
        self.assertEqual(out.count("(from compiled)"), 2, out)
        self.assertNotIn("from the server", out)


if __name__ == "__main__":
    unittest.main()
