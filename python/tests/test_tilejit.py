"""The tilejit package against PyTorch and float64.

Without torch or a GPU only the C interface's error paths run (the rest is
skipped, saying why). Run: TILEJIT_LIB=build/service/libtilejit.so
python3 -m unittest discover -s python/tests -v
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import tilejit  # noqa: E402
from tilejit import _lib  # noqa: E402

try:
    import torch
    HAVE_GPU = torch.cuda.is_available()
    WHY = "" if HAVE_GPU else "no CUDA device for torch"
except ImportError:
    torch = None
    HAVE_GPU = False
    WHY = "torch is not installed"


class CInterface(unittest.TestCase):
    def test_version_and_errors_name_the_argument(self):
        lib = _lib.lib()
        self.assertEqual(tilejit.version(), "0.1.0")
        import ctypes
        self.assertEqual(lib.tj_engine_create(0, None), 1)
        self.assertIn("out is null", lib.tj_last_error().decode())
        self.assertEqual(lib.tj_gemm(None, 0, 0, 0, 0, 1, 1, 1, None, 0, None, 0, None, None,
                                     1.0, 0.0, -1, None), 1)
        self.assertIn("engine is null", lib.tj_last_error().decode())
        h = ctypes.c_void_p()
        self.assertEqual(lib.tj_engine_create(-1, ctypes.byref(h)), 1)
        self.assertIn("device must be >= 0", lib.tj_last_error().decode())

    @unittest.skipIf(HAVE_GPU, "a GPU is present")
    def test_no_gpu_is_a_clean_error(self):
        with self.assertRaises(tilejit.TilejitError) as cm:
            _lib.engine(0)
        self.assertTrue(str(cm.exception))


def _ref_rms(x, w, eps, zcg):
    xd, wd = x.double(), w.double()
    g = 1 + wd if zcg else wd
    rstd = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps)
    return xd * rstd * g, rstd.squeeze(-1)


def _close(test, got, ref, rtol, what):
    got = got.double()
    err = (got - ref).abs().max().item()
    scale = ref.abs().max().item() + 1e-12
    test.assertTrue(torch.isfinite(got).all().item(), f"{what}: non-finite values")
    test.assertLessEqual(err / scale, rtol, f"{what}: max error {err:.3g} of {scale:.3g}")


@unittest.skipUnless(HAVE_GPU, WHY)
class Ops(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(int.from_bytes(os.urandom(4), "little"))

    def test_rms_norm_forward_and_gradients(self):
        for rows, cols, dt, zcg in [(3, 1000, torch.bfloat16, False), (17, 4097, torch.float16, True),
                                    (2048, 4096, torch.bfloat16, False), (5, 64, torch.float32, True)]:
            with self.subTest(rows=rows, cols=cols, dtype=dt, zcg=zcg):
                x = torch.randn(rows, cols, device="cuda", dtype=dt, requires_grad=True)
                w = (0.1 * torch.randn(cols, device="cuda", dtype=dt)).requires_grad_()
                y = tilejit.ops.rms_norm(x, w, 1e-5, zcg)
                ref, _ = _ref_rms(x.detach(), w.detach(), 1e-5, zcg)
                _close(self, y, ref, 2e-2 if dt != torch.float32 else 1e-5, "y")
                dy = torch.randn_like(y)
                dx, dw = torch.autograd.grad(y, (x, w), dy)
                xd = x.detach().double().requires_grad_()
                wd = w.detach().double().requires_grad_()
                r, _ = _ref_rms(xd, wd, 1e-5, zcg)
                rdx, rdw = torch.autograd.grad(r, (xd, wd), dy.double())
                _close(self, dx, rdx, 3e-2 if dt != torch.float32 else 1e-4, "dx")
                _close(self, dw, rdw, 3e-2 if dt != torch.float32 else 1e-4, "dw")

    def test_mm_every_layout_and_its_gradients(self):
        m, n, k = 296, 264, 136  # rows 16-byte aligned, no size a multiple of a tile
        for ta in (False, True):
            for tb in (False, True):
                with self.subTest(ta=ta, tb=tb):
                    a0 = torch.randn((k, m) if ta else (m, k), device="cuda", dtype=torch.bfloat16)
                    b0 = torch.randn((n, k) if tb else (k, n), device="cuda", dtype=torch.bfloat16)
                    a = (a0.t() if ta else a0).detach().requires_grad_()
                    b = (b0.t() if tb else b0).detach().requires_grad_()
                    d = tilejit.ops.mm(a, b)
                    _close(self, d, a.double() @ b.double(), 1e-2, "d")
                    g = torch.randn_like(d)
                    da, db = torch.autograd.grad(d, (a, b), g)
                    _close(self, da, g.double() @ b.double().t(), 2e-2, "da")
                    _close(self, db, a.double().t() @ g.double(), 2e-2, "db")
        d32 = tilejit.ops.mm(a, b, torch.float32)
        self.assertEqual(d32.dtype, torch.float32)

    def test_linear_module_is_a_drop_in_and_accumulates_main_grad(self):
        ref = torch.nn.Linear(256, 384, device="cuda", dtype=torch.bfloat16)
        lin = tilejit.nn.Linear(256, 384, device="cuda", dtype=torch.bfloat16)
        self.assertEqual(set(lin.state_dict()), set(ref.state_dict()))
        lin.load_state_dict(ref.state_dict())
        x = torch.randn(4, 50, 256, device="cuda", dtype=torch.bfloat16)
        _close(self, lin(x), torch.nn.functional.linear(x.double(), ref.weight.double(),
                                                        ref.bias.double()), 1e-2, "linear")
        fused = tilejit.nn.Linear(256, 384, bias=False, device="cuda", dtype=torch.bfloat16,
                                  gradient_accumulation_fusion=True)
        xg = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
        g = torch.randn(64, 384, device="cuda", dtype=torch.bfloat16)
        for _ in range(2):
            fused(xg).backward(g)
        self.assertIsNone(fused.weight.grad)
        _close(self, fused.weight.main_grad, 2 * (g.double().t() @ xg.double()), 1e-3,
               "main_grad")

    def test_enable_routes_and_use_scopes(self):
        calls = []
        orig = tilejit.ops.linear

        def counting(*args, **kw):
            calls.append(1)
            return orig(*args, **kw)
        tilejit.ops.linear = counting
        try:
            tilejit.enable()
            x = torch.randn(32, 128, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
            torch.nn.functional.linear(x, w)
            self.assertEqual(len(calls), 1)
            with tilejit.use(False):
                torch.nn.functional.linear(x, w)
            self.assertEqual(len(calls), 1)
            torch.nn.functional.linear(x.float(), w.float())  # f32: torch's own
            self.assertEqual(len(calls), 1)
            norm = torch.nn.RMSNorm(128, device="cuda", dtype=torch.bfloat16)
            y = norm(x)
            ref, _ = _ref_rms(x, norm.weight.detach(), torch.finfo(torch.bfloat16).eps, False)
            _close(self, y, ref, 2e-2, "nn.RMSNorm routed")
        finally:
            tilejit.ops.linear = orig
            tilejit.disable()

    def test_compile_traces_the_fake_kernels(self):
        def f(x, w, v):
            return tilejit.ops.linear(tilejit.ops.rms_norm(x, v), w)
        x = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
        v = torch.ones(256, device="cuda", dtype=torch.bfloat16)
        eager = f(x, w, v)
        compiled = torch.compile(f, backend="aot_eager", fullgraph=True)(x, w, v)
        self.assertTrue(torch.equal(eager, compiled))

    def test_opcheck_every_op(self):
        x = torch.randn(33, 264, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(264, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        torch.library.opcheck(torch.ops.tilejit.rms_norm_fwd.default, (x, w, 1e-5, False))
        y, rstd = torch.ops.tilejit.rms_norm_fwd(x, w, 1e-5, False)
        torch.library.opcheck(torch.ops.tilejit.rms_norm_bwd.default,
                              (torch.randn_like(y).detach(), x.detach(), rstd.detach(), w.detach(), False))
        a = torch.randn(40, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        b = torch.randn(64, 72, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        torch.library.opcheck(torch.ops.tilejit.mm.default, (a, b))
        c = torch.zeros(40, 72, device="cuda", dtype=torch.float32)
        torch.library.opcheck(torch.ops.tilejit.mm_accumulate_.default,
                              (a.detach(), b.detach(), c))

    def test_bad_inputs_raise_clear_errors(self):
        w = torch.ones(64, device="cuda", dtype=torch.bfloat16)
        with self.assertRaisesRegex(Exception, "x is on cpu; tilejit runs on CUDA tensors"):
            tilejit.ops.rms_norm(torch.ones(4, 64, dtype=torch.bfloat16), w)
        with self.assertRaisesRegex(Exception, "does not match the last dimension"):
            tilejit.ops.rms_norm(torch.ones(4, 63, device="cuda", dtype=torch.bfloat16), w)
        a = torch.ones(8, 64, device="cuda", dtype=torch.bfloat16)
        with self.assertRaisesRegex(Exception, "do not multiply"):
            tilejit.ops.mm(a, torch.ones(32, 8, device="cuda", dtype=torch.bfloat16))
        with self.assertRaisesRegex(Exception, "both bf16 or both f16"):
            tilejit.ops.mm(a.float(), torch.ones(64, 8, device="cuda"))
        with self.assertRaisesRegex(Exception, "16-byte aligned|multiple of 16"):
            tilejit.ops.mm(torch.ones(8, 60, device="cuda", dtype=torch.bfloat16)[:, :57],
                           torch.ones(57, 8, device="cuda", dtype=torch.bfloat16))

    def test_sm_margin_and_determinism_keep_results(self):
        a = torch.randn(1000, 512, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(512, 1000, device="cuda", dtype=torch.bfloat16)
        full = tilejit.ops.mm(a, b)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        narrow = tilejit.ops.mm(a, b, None, sms - 2)  # two programs walk every tile
        self.assertTrue(torch.equal(full, narrow))
        with self.assertRaisesRegex(Exception, "sm_margin must be"):
            tilejit.ops.mm(a, b, None, sms)
        torch.use_deterministic_algorithms(True)
        try:
            self.assertTrue(torch.equal(tilejit.ops.mm(a, b), full))
        finally:
            torch.use_deterministic_algorithms(False)

    def test_warmup_then_capture_a_new_shape(self):
        tilejit.warmup(linear=[(96, 320, 160)], rms_norm=[(96, 320)])
        x = torch.randn(96, 320, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(160, 320, device="cuda", dtype=torch.bfloat16)
        v = torch.ones(320, device="cuda", dtype=torch.bfloat16)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):  # nothing compiled during capture: warmed up
            out = tilejit.ops.linear(tilejit.ops.rms_norm(x, v), w)
        g.replay()
        torch.cuda.synchronize()
        ref = _ref_rms(x, v, 1e-6, False)[0] @ w.double().t()
        _close(self, out, ref, 2e-2, "captured")

    def test_explain_says_what_a_call_uses(self):
        x = torch.randn(48, 136, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(72, 136, device="cuda", dtype=torch.bfloat16)
        before = tilejit.explain("linear", x, w)
        self.assertIn("gemm ab=bf16 out=bf16 ta=0 tb=1 c=0 m=48 n=72 k=136", before)
        self.assertIn("next", before)
        tilejit.ops.linear(x, w)
        after = tilejit.explain("linear", x, w)
        self.assertIn("loaded", after)
        self.assertIn("bm=", after)
        v = torch.ones(136, device="cuda", dtype=torch.bfloat16)
        tilejit.ops.rms_norm(x, v)
        self.assertIn("loaded", tilejit.explain("rms_norm", x, v))
        with self.assertRaisesRegex(ValueError, "unknown op"):
            tilejit.explain("conv", x, w)

    def test_loads_beside_triton(self):
        import triton  # noqa: F401  (brings its own LLVM into the process)
        x = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
        _close(self, tilejit.ops.linear(x, w), x.double() @ w.double().t(), 1e-2, "beside triton")

    def test_cuda_graph_replays(self):
        x = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(192, 256, device="cuda", dtype=torch.bfloat16)
        y = tilejit.ops.linear(x, w)  # loaded before capture
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = tilejit.ops.linear(x, w)
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        _close(self, out, x.double() @ w.double().t(), 1e-2, "replayed")
        self.assertFalse(torch.equal(out, y))


if __name__ == "__main__":
    unittest.main(verbosity=2)
