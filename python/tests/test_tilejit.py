"""The tilejit package against PyTorch and float64.

Without torch or a GPU only the C interface's error paths run; with torch but
no GPU also the attention ops' fake kernels, the backward's refusals and the
routing of F.scaled_dot_product_attention (on fake CUDA tensors); the rest is
skipped, saying why. Run: TILEJIT_LIB=build/service/libtilejit.so
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
    from torch._subclasses.fake_tensor import FakeTensorMode
except ImportError:
    torch = None
    HAVE_GPU = False
    WHY = "torch is not installed"
HOPPER = HAVE_GPU and torch.cuda.get_device_capability(0) == (9, 0)
WHY_HOPPER = WHY or ("" if HOPPER else "the attention kernel runs on sm_90 (Hopper)")


class CInterface(unittest.TestCase):
    def test_a_library_of_another_version_is_refused(self):
        _lib.lib()
        loaded, written = _lib._lib, _lib.ABI_VERSION
        try:
            _lib._lib, _lib.ABI_VERSION = None, "0.0.0"
            with self.assertRaisesRegex(_lib.TilejitError,
                                        r"is libtilejit \S+; this package is written for 0\.0\.0"):
                _lib.lib()
        finally:
            _lib._lib, _lib.ABI_VERSION = loaded, written

    def test_version_and_errors_name_the_argument(self):
        lib = _lib.lib()
        # The library is the package's version (pyproject.toml).
        with open(os.path.join(os.path.dirname(__file__), "..", "pyproject.toml")) as f:
            meta = f.read()
        self.assertIn(f'version = "{tilejit.version()}"', meta)
        import ctypes
        self.assertEqual(lib.tj_engine_create(0, None), 1)
        self.assertIn("out is null", lib.tj_last_error().decode())
        self.assertEqual(lib.tj_gemm(None, 0, 0, 0, 0, 1, 1, 1, None, 0, None, 0, None, 0, None,
                                     None, 0, 1.0, 0.0, -1, None), 1)
        self.assertIn("engine is null", lib.tj_last_error().decode())
        h = ctypes.c_void_p()
        self.assertEqual(lib.tj_engine_create(-1, ctypes.byref(h)), 1)
        self.assertIn("device must be >= 0", lib.tj_last_error().decode())
        self.assertEqual(lib.tj_attn_fwd(None, 0, 1, 1, 64, 64, 1, 1, 64, 0, 0.0, 16, 16, 16, 16,
                                         16, None), 1)
        self.assertIn("engine is null", lib.tj_last_error().decode())
        self.assertEqual(lib.tj_attn_fwd_prepare(None, 0, 1, 1, 64, 64, 1, 1, 64, 0), 1)
        self.assertIn("engine is null", lib.tj_last_error().decode())
        self.assertEqual(lib.tj_attn_explain(None, 1, 0, 1, 1, 64, 64, 1, 1, 64, 0, None, 0,
                                             None), 1)
        self.assertIn("engine is null", lib.tj_last_error().decode())
        self.assertEqual(lib.tj_engine_release_scratch(None, 0, None), 1)
        self.assertIn("engine is null", lib.tj_last_error().decode())

    @unittest.skipIf(HAVE_GPU, "a GPU is present")
    def test_no_gpu_is_a_clean_error(self):
        with self.assertRaises(tilejit.TilejitError) as cm:
            _lib.engine(0)
        self.assertTrue(str(cm.exception))


def _engine_or_why():
    """An engine on device 0 (the C interface alone: no torch needed), or why
    there is none."""
    try:
        return _lib.engine(0), ""
    except _lib.TilejitError as e:
        return None, f"no engine on device 0: {e}"


class CInterfaceAttentionArguments(unittest.TestCase):
    """tj_attn_fwd refuses each bad argument by name before anything reaches
    the GPU (the addresses here are never dereferenced)."""

    def setUp(self):
        self.engine, why = _engine_or_why()
        if self.engine is None:
            self.skipTest(why)
        self.lib = _lib.lib()

    def call(self, dtype=0, layout=1, b=2, sq=100, sk=77, hq=4, hkv=2, d=64, causal=1, scale=0.0,
             q=0x100000, k=0x200000, v=0x300000, o=0x400000, lse=0x500000):
        status = self.lib.tj_attn_fwd(self.engine, dtype, layout, b, sq, sk, hq, hkv, d, causal,
                                      scale, q, k, v, o, lse, None)
        return status, self.lib.tj_last_error().decode()

    def assertRefused(self, message, **args):
        status, error = self.call(**args)
        self.assertEqual(status, 1, f"{args}: status {status}, {error!r}")
        self.assertIn(message, error, f"{args}")

    def test_each_bad_argument_is_named(self):
        self.assertRefused("layout must be TJ_BSHD (0) or TJ_BHSD (1), got 3", layout=3)
        self.assertRefused("layout TJ_THD (2), packed sequences, goes through tj_attn_varlen_fwd",
                           layout=2)
        self.assertRefused("dtype is not a tj_dtype (7)", dtype=7)
        self.assertRefused("bf16 or f16", dtype=2)
        self.assertRefused("head dim d must be 64, 128 or 256, got d=96", d=96)
        self.assertRefused("kv heads must divide query heads, got hq=6 hkv=4", hq=6, hkv=4)
        self.assertRefused("sizes must be positive", sq=0)
        self.assertRefused("sizes must be positive", b=-1)
        self.assertRefused("hq = 2048 is above the largest supported (1024)", hq=2048)
        self.assertRefused("scale must be positive and finite", scale=-0.5)
        self.assertRefused("scale must be positive and finite", scale=float("nan"))
        self.assertRefused("scale must be positive and finite", scale=float("inf"))
        for name in ("q", "k", "v", "o", "lse"):
            self.assertRefused(f"{name} is null", **{name: None})
            self.assertRefused(f"{name} is at 0x60008, not 16-byte aligned", **{name: 0x60008})

    def test_packed_sequences_name_their_arguments(self):
        def varlen(total_q=600, total_k=500, cu_q=0x70000, cu_k=0x71000, d=64, max_sq=300):
            status = self.lib.tj_attn_varlen_fwd(self.engine, 0, 3, max_sq, 250, total_q, total_k,
                                                 4, 2, d, 1, 0.0, cu_q, cu_k, 0x1000000,
                                                 0x2000000, 0x3000000, 0x4000000, 0x5000000, None)
            return status, self.lib.tj_last_error().decode()
        for args, message in (({"cu_q": None}, "cu_seqlens_q is null"),
                              ({"cu_k": 0x71002}, "cu_seqlens_k is not 4-byte aligned"),
                              ({"total_k": -1}, "total_q and total_k (the rows of q and of "
                                                "k in all) must be >= 0, got total_q=600 "
                                                "total_k=-1"),
                              ({"d": 96}, "head dim d must be 64, 128 or 256, got d=96"),
                              ({"total_q": 901}, "packed Q has 901 rows in all, more than b=3 "
                                                 "sequences of at most 300 rows"),
                              ({"total_k": 751}, "packed K has 751 rows in all, more than b=3 "
                                                 "sequences of at most 250 rows"),
                              ({"total_q": 0, "max_sq": -1}, "max_sq and max_sk (the longest "
                                                             "sequence's rows) must be >= 0"),
                              ({"max_sq": 0}, "max_sq must be >= 1 where total_q > 0, got "
                                              "max_sq=0 total_q=600"),
                              ({"max_sq": (1 << 22) + 1}, "max_sq=4194305 is above the longest "
                                                          "sequence supported (4194304)"),
                              ({"total_q": 1 << 31}, "total_q=2147483648 is more than cu_seqlens "
                                                     "(int32) can count"),
                              ({"cu_q": 0x4000100}, "o overlaps cu_seqlens_q")):
            status, error = varlen(**args)
            self.assertEqual(status, 1, f"{args}: status {status}, {error!r}")
            self.assertIn(message, error, f"{args}")

    def test_outputs_that_share_memory_with_another_tensor_are_refused(self):
        # (q 2 x 100 x 4 x 64 bf16: 0x19000 bytes from 0x100000.)
        self.assertRefused("o overlaps q", o=0x118ff0)
        self.assertRefused("o overlaps v", o=0x300000)
        self.assertRefused("lse overlaps q", lse=0x100000)
        self.assertRefused("o overlaps lse", o=0x4ff000)
        # The backward's gradients and workspace likewise, and a workspace
        # smaller than tj_attn_bwd_workspace_size's is refused by its size.
        import ctypes
        need = ctypes.c_int64(0)
        self.assertEqual(self.lib.tj_attn_bwd_workspace_size(self.engine, 2, 100, 77, 4, 2, 64,
                                                             ctypes.byref(need)), 0)

        def bwd(dq=0x600000, dk=0x700000, dv=0x800000, ws=0x900000, ws_bytes=need.value):
            status = self.lib.tj_attn_bwd(self.engine, 0, 1, 2, 100, 77, 4, 2, 64, 1, 0.0,
                                          0x100000, 0x200000, 0x300000, 0x400000, 0x500000,
                                          0x580000, dq, dk, dv, ws, ws_bytes, None)
            return status, self.lib.tj_last_error().decode()
        for args, message in (({"dq": 0x100000}, "dq overlaps q"),
                              ({"dq": 0x580000}, "dq overlaps dout"),
                              ({"dk": 0x800000}, "dk overlaps dv"),
                              ({"dv": 0x500000}, "dv overlaps lse"),
                              ({"ws": 0x600000}, "dq overlaps workspace"),
                              ({"ws_bytes": need.value - 16},
                               f"workspace_bytes={need.value - 16} is less than the "
                               f"{need.value} bytes these sizes need"),
                              ({"ws_bytes": 0}, "workspace_bytes=0 is less than")):
            status, error = bwd(**args)
            self.assertEqual(status, 1, f"{args}: status {status}, {error!r}")
            self.assertIn(message, error, f"{args}")

    def test_the_workspace_size_refuses_what_the_backward_would(self):
        import ctypes
        size = ctypes.c_int64(0)
        for args, message in (((2, 100, 77, 4, 2, 96), "head dim d must be 64, 128 or 256"),
                              ((2, (1 << 22) + 1, 77, 4, 2, 64),
                               "sq = 4194305 is above the largest supported (4194304)"),
                              ((2, 100, 77, 4, 3, 64), "hkv=3 must divide hq=4")):
            status = self.lib.tj_attn_bwd_workspace_size(self.engine, *args, ctypes.byref(size))
            error = self.lib.tj_last_error().decode()
            self.assertEqual(status, 1, f"{args}: status {status}, {error!r}")
            self.assertIn(message, error, f"{args}")
        self.assertEqual(self.lib.tj_attn_bwd_workspace_size(self.engine, 2, 100, 77, 4, 2, 64,
                                                             ctypes.byref(size)), 0)
        self.assertGreater(size.value, 0)

    def test_prepare_checks_the_same_shape(self):
        lib = self.lib
        self.assertEqual(lib.tj_attn_fwd_prepare(self.engine, 0, 3, 1, 64, 64, 1, 1, 64, 0), 1)
        self.assertIn("layout must be", lib.tj_last_error().decode())
        self.assertEqual(lib.tj_attn_fwd_prepare(self.engine, 0, 0, 1, 64, 64, 1, 1, 32, 0), 1)
        self.assertIn("d must be >= 64, got 32", lib.tj_last_error().decode())
        self.assertEqual(lib.tj_attn_fwd_prepare(self.engine, 0, 0, 1, 64, 64, 3, 2, 64, 0), 1)
        self.assertIn("kv heads must divide", lib.tj_last_error().decode())


@unittest.skipIf(torch is None, "torch is not installed")
class AttentionWithoutGpu(unittest.TestCase):
    """The attention ops' fake kernels, the backward's refusals and the
    routing of F.scaled_dot_product_attention, on fake CUDA tensors: no GPU
    needed."""

    def test_fake_kernel_shapes_in_both_layouts(self):
        for mode in ("fake", "meta"):
            for layout in (0, 1):
                with self.subTest(mode=mode, layout=layout):
                    # b=2, sq=100, sk=77, hq=8, hkv=2, d=128
                    qs = (2, 100, 8, 128) if layout == 0 else (2, 8, 100, 128)
                    ks = (2, 77, 2, 128) if layout == 0 else (2, 2, 77, 128)
                    ctx = FakeTensorMode() if mode == "fake" else _nullcontext()
                    dev = "cuda:0" if mode == "fake" else "meta"
                    with ctx:
                        q = torch.empty(qs, device=dev, dtype=torch.float16)
                        k = torch.empty(ks, device=dev, dtype=torch.float16)
                        o, lse = torch.ops.tilejit.attn_fwd(q, k, k.clone(), True, 0.0, layout)
                    self.assertEqual(tuple(o.shape), qs)
                    self.assertEqual(o.dtype, torch.float16)
                    self.assertTrue(o.is_contiguous())
                    self.assertEqual(tuple(lse.shape), (2, 8, 100))
                    self.assertEqual(lse.dtype, torch.float32)
                    self.assertEqual(o.device, q.device)

    def test_fake_kernel_refuses_what_the_op_refuses(self):
        q = torch.empty(1, 4, 16, 64, device="meta", dtype=torch.bfloat16)
        with self.assertRaisesRegex(ValueError, "layout must be 0 .* or 1 .*, got 2"):
            torch.ops.tilejit.attn_fwd(q, q, q, False, 0.0, 2)
        with self.assertRaisesRegex(ValueError, "do not fit q"):
            torch.ops.tilejit.attn_fwd(q, q, q[..., :32], False, 0.0, 1)
        with self.assertRaisesRegex(ValueError, "must be 4-D"):
            torch.ops.tilejit.attn_fwd(q[0], q[0], q[0], False, 0.0, 1)

    def test_backward_traces_through_the_fake_kernels(self):
        for layout, qs, ks in ((1, (1, 4, 16, 64), (1, 2, 24, 64)),
                               (0, (2, 16, 4, 128), (2, 24, 1, 128)),
                               (1, (1, 2, 16, 256), (1, 2, 16, 256))):
            with self.subTest(layout=layout):
                q = torch.empty(qs, device="meta", dtype=torch.bfloat16, requires_grad=True)
                k = torch.empty(ks, device="meta", dtype=torch.bfloat16, requires_grad=True)
                v = torch.empty(ks, device="meta", dtype=torch.bfloat16, requires_grad=True)
                o, _ = torch.ops.tilejit.attn_fwd(q, k, v, True, 0.0, layout)
                self.assertTrue(o.requires_grad)
                dq, dk, dv = torch.autograd.grad(o.sum(), (q, k, v))
                self.assertEqual((dq.shape, dk.shape, dv.shape), (q.shape, k.shape, v.shape))
                self.assertEqual(dk.dtype, torch.bfloat16)

    def test_lse_is_not_differentiable(self):
        q = torch.empty(1, 4, 16, 64, device="meta", dtype=torch.bfloat16, requires_grad=True)
        k = torch.empty(1, 4, 16, 64, device="meta", dtype=torch.bfloat16)
        o, lse = torch.ops.tilejit.attn_fwd(q, k, k, False, 0.0, 1)
        self.assertTrue(o.requires_grad)
        self.assertFalse(lse.requires_grad)  # as torch's attention kernels' log-sum-exp

    def test_fake_kernels_check_what_the_ops_check(self):
        # dtypes, head dims and kv heads the kernels do not take, and the
        # backward's do, o and lse: refused while tracing, as at run time.
        def meta(*shape, dtype=torch.bfloat16):
            return torch.empty(*shape, device="meta", dtype=dtype)
        q, k = meta(1, 4, 16, 64), meta(1, 2, 16, 64)
        with self.assertRaisesRegex(ValueError, "all bf16 or all f16"):
            torch.ops.tilejit.attn_fwd(q.float(), k.float(), k.float(), False, 0.0, 1)
        with self.assertRaisesRegex(ValueError, "head dim 80"):
            torch.ops.tilejit.attn_fwd(meta(1, 4, 16, 80), meta(1, 2, 16, 80), meta(1, 2, 16, 80),
                                       False, 0.0, 1)
        with self.assertRaisesRegex(ValueError, "3 kv heads do not divide 4 query heads"):
            torch.ops.tilejit.attn_fwd(q, meta(1, 3, 16, 64), meta(1, 3, 16, 64), False, 0.0, 1)
        o, lse = torch.ops.tilejit.attn_fwd(q, k, k, False, 0.0, 1)
        with self.assertRaisesRegex(ValueError, "lse .* must be \\(1, 4, 16\\) float32"):
            torch.ops.tilejit.attn_bwd(o, q, k, k, o, lse[:, :2], False, 0.0, 1)
        with self.assertRaisesRegex(ValueError, "do .* and o .* must match q"):
            torch.ops.tilejit.attn_bwd(o[..., :32], q, k, k, o, lse, False, 0.0, 1)

    def test_packed_sequences_fake_kernels_and_bad_calls(self):
        # 3 sequences, 600 query and 500 key rows in all, the longest 300 and 250.
        q = torch.empty(600, 8, 128, device="meta", dtype=torch.bfloat16, requires_grad=True)
        k = torch.empty(500, 2, 128, device="meta", dtype=torch.bfloat16)
        cu = torch.empty(4, device="meta", dtype=torch.int32)
        o, lse = torch.ops.tilejit.attn_varlen_fwd(q, k, k, cu, cu, 300, 250, True, 0.0)
        self.assertEqual((o.shape, lse.shape, lse.dtype), (q.shape, (3, 8, 300), torch.float32))
        self.assertTrue(o.requires_grad)
        self.assertFalse(lse.requires_grad)
        dq, dk, dv = torch.ops.tilejit.attn_varlen_bwd(o, q, k, k, o, lse, cu, cu, 300, 250, True,
                                                       0.0)
        self.assertEqual((dq.shape, dk.shape, dv.shape), (q.shape, k.shape, k.shape))
        with self.assertRaisesRegex(ValueError, "cu_seqlens_q .* must be int32"):
            torch.ops.tilejit.attn_varlen_fwd(q, k, k, cu.long(), cu, 300, 250, True, 0.0)
        with self.assertRaisesRegex(ValueError, "must name the same sequences"):
            torch.ops.tilejit.attn_varlen_fwd(q, k, k, cu, cu[:3], 300, 250, True, 0.0)
        with self.assertRaisesRegex(ValueError, "max_seqlen_k must be a positive int"):
            torch.ops.tilejit.attn_varlen_fwd(q, k, k, cu, cu, 300, 0, True, 0.0)
        with self.assertRaisesRegex(ValueError, "q has 600 rows, more than 3 sequences of at "
                                    "most max_seqlen_q=199"):
            torch.ops.tilejit.attn_varlen_fwd(q, k, k, cu, cu, 199, 250, True, 0.0)
        with self.assertRaisesRegex(ValueError, "max_seqlen_k=4194305 is more than the 4194304"):
            torch.ops.tilejit.attn_varlen_fwd(q, k, k, cu, cu, 300, (1 << 22) + 1, True, 0.0)
        with self.assertRaisesRegex(ValueError, "must be 3-D"):
            torch.ops.tilejit.attn_varlen_fwd(q[None], k, k, cu, cu, 300, 250, True, 0.0)
        # torch.compile with lengths that change from call to call (SymInts).
        def f(q, k, v, cu, m):
            return tilejit.ops.attention_varlen(q, k, v, cu, cu, m, m, causal=True) * 2
        torch._dynamo.reset()
        g = torch.compile(f, backend="aot_eager", fullgraph=True, dynamic=True)
        for m in (300, 310):
            qm = torch.empty(600, 8, 128, device="meta", dtype=torch.bfloat16)
            out = g(qm, qm, qm, cu, m)
            self.assertEqual((out.shape, out.dtype), (qm.shape, qm.dtype))
        with FakeTensorMode():
            qf = torch.empty(6, 2, 64, device="cuda:0", dtype=torch.bfloat16)
            on_gpu = torch.zeros(2, device="cuda:0", dtype=torch.int32)
            with self.assertRaisesRegex(ValueError, "cu_seqlens_q is on cpu"):
                tilejit.ops.attention_varlen(qf, qf, qf, torch.zeros(2, dtype=torch.int32),
                                             on_gpu, 6, 6)

    def test_compile_traces_attention_through_the_fake_kernel(self):
        def f(q, k, v):
            return tilejit.ops.attention(q, k, v, causal=True, layout="bshd") * 2
        q = torch.empty(2, 64, 4, 128, device="meta", dtype=torch.bfloat16)
        k = torch.empty(2, 80, 2, 128, device="meta", dtype=torch.bfloat16)
        torch._dynamo.reset()
        out = torch.compile(f, backend="aot_eager", fullgraph=True)(q, k, k)
        self.assertEqual((out.shape, out.dtype), (q.shape, q.dtype))

    def test_bad_attention_calls_name_the_argument(self):
        cpu = torch.zeros(1, 2, 8, 64, dtype=torch.bfloat16)
        with self.assertRaisesRegex(ValueError, "q is on cpu; tilejit runs on CUDA tensors"):
            tilejit.ops.attention(cpu, cpu, cpu)
        with self.assertRaisesRegex(ValueError, "scale must be positive and finite"):
            tilejit.ops.attention(cpu, cpu, cpu, scale=0.0)
        # (1e-50 is 0 as a float32, which the C interface reads as 1/sqrt(d).)
        with self.assertRaisesRegex(ValueError, "positive and finite as a float32"):
            tilejit.ops.attention(cpu, cpu, cpu, scale=1e-50)
        with self.assertRaisesRegex(ValueError, "positive and finite as a float32.*got 1e-50"):
            torch.ops.tilejit.attn_fwd(cpu, cpu, cpu, False, 1e-50, 1)
        with self.assertRaisesRegex(ValueError, "layout 'sbhd' is not"):
            tilejit.ops.attention(cpu, cpu, cpu, layout="sbhd")
        with self.assertRaisesRegex(ValueError, "attention call .* is not"):
            tilejit.warmup(attention=[(1, 64, 64, 2, 2, 64)])
        with self.assertRaisesRegex(ValueError, "layout 'x' is not"):
            tilejit.warmup(attention=[(1, 64, 64, 2, 2, 64, True, "x")])

    def test_enable_names_attention_as_sdpa(self):
        try:
            tilejit.enable(include=("attention",))
            self.assertEqual(tilejit._enabled, {"linear": False, "rms_norm": False, "sdpa": True})
            tilejit.enable(exclude=("scaled_dot_product_attention",))
            self.assertEqual(tilejit._enabled, {"linear": True, "rms_norm": True, "sdpa": False})
            tilejit.enable()
            self.assertTrue(all(tilejit._enabled.values()))
            with self.assertRaisesRegex(ValueError, "unknown op 'flash'"):
                tilejit.enable(include=("linear", "flash"))
            self.assertTrue(all(tilejit._enabled.values()))  # unchanged by the refused call
        finally:
            tilejit.disable()

    def test_sdpa_routing_decisions(self):
        F = torch.nn.functional
        routed, fell_back = [], []

        def fake_attention(q, k, v, causal, scale, layout):
            routed.append((q, k, v, causal, scale, layout))
            return torch.empty_like(q)

        def fake_torch(*args, **kwargs):
            fell_back.append((args, kwargs))
            return torch.empty_like(args[0])

        tilejit.enable()
        saved = (tilejit.ops.attention, tilejit._originals["sdpa"], dict(tilejit._capability))
        tilejit.ops.attention = fake_attention
        tilejit._originals["sdpa"] = fake_torch
        tilejit._capability[0] = (9, 0)
        try:
            with FakeTensorMode():
                bf = dict(device="cuda:0", dtype=torch.bfloat16)

                def bhsd(b, h, s, d, **kw):
                    return torch.randn(b, h, s, d, **{**bf, **kw})

                def bshd(b, h, s, d, **kw):  # [b, s, h, d] storage seen as [b, h, s, d]
                    return torch.randn(b, s, h, d, **{**bf, **kw}).transpose(1, 2)

                def takes(*args, **kwargs):
                    n = len(routed), len(fell_back)
                    out = F.scaled_dot_product_attention(*args, **kwargs)
                    self.assertEqual((len(routed), len(fell_back)), (n[0] + 1, n[1]),
                                     "not routed")
                    self.assertEqual(out.shape, args[0].shape)
                    return routed[-1]

                def refuses(why, *args, **kwargs):
                    n = len(routed), len(fell_back)
                    with self.assertLogs("tilejit", "DEBUG") as logs:
                        F.scaled_dot_product_attention(*args, **kwargs)
                    self.assertEqual((len(routed), len(fell_back)), (n[0], n[1] + 1),
                                     f"not left to torch ({why})")
                    self.assertEqual(fell_back[-1], (args, kwargs))  # torch gets the call as made
                    self.assertIn(why, logs.output[-1])

                q, k, v = bhsd(2, 8, 100, 128), bhsd(2, 8, 77, 128), bhsd(2, 8, 77, 128)
                got = takes(q, k, v)
                self.assertTrue(got[0] is q and got[1] is k and got[2] is v)
                self.assertEqual(got[3:], (False, None, tilejit.ops.BHSD))
                got = takes(q, k, v, None, 0.0, True, scale=0.125)
                self.assertEqual(got[3:], (True, 0.125, tilejit.ops.BHSD))

                qt, kt, vt = bshd(2, 8, 100, 64), bshd(2, 8, 77, 64), bshd(2, 8, 77, 64)
                got = takes(qt, kt, vt, is_causal=True)
                self.assertEqual(got[5], tilejit.ops.BSHD)
                self.assertEqual(tuple(got[0].shape), (2, 100, 8, 64))  # as stored, no copy
                self.assertTrue(all(t.is_contiguous() for t in got[:3]))
                self.assertIs(got[0]._base, qt._base)

                kg, vg = bhsd(2, 2, 77, 128), bhsd(2, 2, 77, 128)
                takes(q, kg, vg, enable_gqa=True)
                f16 = torch.float16
                takes(bhsd(1, 4, 1, 256, dtype=f16), bhsd(1, 4, 9, 256, dtype=f16),
                      bhsd(1, 4, 9, 256, dtype=f16))
                # One query row (decoding): q is both layouts at once, k and v decide.
                got = takes(bshd(2, 8, 1, 64), bshd(2, 8, 77, 64), bshd(2, 8, 77, 64))
                self.assertEqual(got[5], tilejit.ops.BSHD)

                refuses("query heads and 2 kv heads", q, kg, vg)  # GQA without enable_gqa
                refuses("query heads and 3 kv heads", q, bhsd(2, 3, 77, 128), bhsd(2, 3, 77, 128),
                        enable_gqa=True)
                refuses("attn_mask", q, k, v,
                        torch.zeros(100, 77, device="cuda:0", dtype=torch.bool))
                refuses("dropout_p=0.1", q, k, v, dropout_p=0.1)
                refuses("dtypes", q.float(), k.float(), v.float())
                refuses("dtypes", q, k.half(), v)
                refuses("head dim 80", bhsd(2, 8, 100, 80), bhsd(2, 8, 77, 80), bhsd(2, 8, 77, 80))
                refuses("do not match q", q, k, bhsd(2, 8, 76, 128))
                refuses("4-D only", q[0], k[0], v[0])
                refuses("scale=0.0", q, k, v, scale=0.0)
                refuses("scale=-1.0", q, k, v, scale=-1.0)
                refuses("scale=1e-50", q, k, v, scale=1e-50)  # 0 as a float32
                refuses("scale=1e+39", q, k, v, scale=1e39)  # inf as a float32
                refuses("strides", q, bhsd(2, 8, 154, 128)[:, :, ::2], v)
                refuses("strides", q, bshd(2, 8, 77, 128), bshd(2, 8, 77, 128))  # mixed layouts
                refuses("16-byte aligned", torch.randn(2 * 8 * 100 * 128 + 4, **bf)[4:]
                        .view(2, 8, 100, 128), k, v)
                refuses("an empty size", bhsd(2, 8, 0, 128), k, v)
                takes(bhsd(2, 8, 100, 128, requires_grad=True), k, v)  # tilejit's backward
                k256, v256 = bhsd(2, 8, 77, 256), bhsd(2, 8, 77, 256)
                takes(bhsd(2, 8, 100, 256, requires_grad=True), k256, v256)  # with a backward
                refuses("one CUDA device", q.cpu(), k.cpu(), v.cpu())
                # Calls torch would refuse are left to it (scale and enable_gqa
                # are keyword-only; an argument given twice), and torch's math
                # back end chosen alone.
                refuses("more than 3 positional arguments", q, k, v, None, 0.0, True, 0.125)
                refuses("arguments given twice: ['attn_mask']", q, k, v, None, attn_mask=None)
                refuses("arguments given twice: ['is_causal']", q, k, v, None, 0.0, True,
                        is_causal=False)
                from torch.nn.attention import SDPBackend, sdpa_kernel
                with sdpa_kernel([SDPBackend.MATH]):
                    refuses("math back end chosen alone", q, k, v)
                tilejit._capability[0] = (8, 0)
                refuses("sm_80", q, k, v)
                tilejit._capability[0] = (9, 0)

                n = len(fell_back)
                with self.assertLogs("tilejit", "DEBUG") as logs:
                    with tilejit.use(False):  # off in this scope: torch's, nothing said
                        F.scaled_dot_product_attention(q, k, v)
                    tilejit._log.debug("end of scope")
                self.assertEqual(len(logs.output), 1, logs.output)
                tilejit.enable(exclude=("sdpa",))
                F.scaled_dot_product_attention(q, k, v)
                self.assertEqual((len(routed), len(fell_back)), (8, n + 2))
        finally:
            tilejit.ops.attention, tilejit._originals["sdpa"] = saved[:2]
            tilejit._capability.clear()
            tilejit._capability.update(saved[2])
            tilejit.disable()


def _nullcontext():
    import contextlib
    return contextlib.nullcontext()


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

    def test_rms_norm_without_gradient_at_growing_row_counts(self):
        # No gradient wanted (the eager path without autograd), row counts
        # up and down.
        w = torch.randn(512, device="cuda", dtype=torch.bfloat16)
        for rows in (3, 1000, 5000, 7, 20000):
            with self.subTest(rows=rows):
                x = torch.randn(rows, 512, device="cuda", dtype=torch.bfloat16)
                ref, _ = _ref_rms(x, w, 1e-5, False)
                _close(self, tilejit.ops.rms_norm(x, w, 1e-5), ref, 2e-2, "y")

    def test_mm_with_bias_and_its_gradients(self):
        m, n, k = 296, 264, 136
        for dt in (torch.bfloat16, torch.float16):
            with self.subTest(dtype=dt):
                a = torch.randn(m, k, device="cuda", dtype=dt, requires_grad=True)
                b = torch.randn(n, k, device="cuda", dtype=dt).t().detach().requires_grad_()
                bias = torch.randn(n, device="cuda", dtype=dt, requires_grad=True)
                d = tilejit.ops.matmul(a, b, bias=bias)
                _close(self, d, a.double() @ b.double() + bias.double(), 1e-2, "d")
                g = torch.randn_like(d)
                da, db, dbias = torch.autograd.grad(d, (a, b, bias), g)
                _close(self, dbias, g.double().sum(0), 2e-2, "dbias")
                _close(self, da, g.double() @ b.double().t(), 2e-2, "da")
                _close(self, db, a.double().t() @ g.double(), 2e-2, "db")
                # A bias one element into its buffer: copied, not misread.
                buf = torch.randn(n + 1, device="cuda", dtype=dt)
                _close(self, tilejit.ops.matmul(a.detach(), b.detach(), bias=buf[1:]),
                       a.double() @ b.double() + buf[1:].double(), 1e-2, "shifted bias")
                traced = torch.ops.tilejit.mm(a, b, None, -1, bias)
                self.assertTrue(torch.equal(traced, d))
        # F.linear with a bias of another dtype: added after the GEMM.
        x = torch.randn(8, 64, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(32, 64, device="cuda", dtype=torch.bfloat16)
        bf = torch.randn(32, device="cuda", dtype=torch.float32)
        _close(self, tilejit.ops.linear(x, w, bf), x.double() @ w.double().t() + bf.double(),
               1e-2, "linear, f32 bias")

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
        bias = torch.randn(72, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        torch.library.opcheck(torch.ops.tilejit.mm.default, (a, b, None, -1, bias))
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
        b8 = torch.ones(64, 8, device="cuda", dtype=torch.bfloat16)
        with self.assertRaisesRegex(Exception, r"bias is \(9,\); it must be \(8,\)"):
            tilejit.ops.mm(a, b8, bias=torch.ones(9, device="cuda", dtype=torch.bfloat16))
        with self.assertRaisesRegex(Exception, "bias is torch.float32; it must be a's dtype"):
            tilejit.ops.mm(a, b8, bias=torch.ones(8, device="cuda"))
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

    def test_rms_norm_graph_replays_after_its_scratch_grew(self):
        # A captured forward without gradient writes its rstd into the scratch
        # buffer of that moment; a later, larger call grows the scratch, and
        # the graph must still replay into memory that is kept.
        w = torch.randn(256, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
        tilejit.ops.rms_norm(x, w, 1e-5)  # loaded before capture
        dev = x.get_device()
        captured = tilejit.ops._rstd_scratch[dev][0]
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = tilejit.ops.rms_norm(x, w, 1e-5)
        rows = tilejit.ops._rstd_scratch[dev][1] + 1  # more than the scratch holds: it grows
        big = torch.randn(rows, 256, device="cuda", dtype=torch.bfloat16)
        ref_big, _ = _ref_rms(big, w, 1e-5, False)
        _close(self, tilejit.ops.rms_norm(big, w, 1e-5), ref_big, 2e-2, "large")
        self.assertNotEqual(tilejit.ops._rstd_scratch[dev][0], captured, "the scratch grew")
        # The buffer the graph writes is still held, so never handed out again.
        self.assertIn(captured, [t.data_ptr() for t in tilejit.ops._rstd_kept])
        del big
        torch.cuda.empty_cache()
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        ref, _ = _ref_rms(x, w, 1e-5, False)
        _close(self, out, ref, 2e-2, "replayed")

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

    def test_accumulate_into_a_16bit_c_off_alignment(self):
        # A 16-bit D leaves through TMA stores, which need 16-byte alignment:
        # a c off 16 bytes (two elements here) is a spec of its own (d16=0)
        # whose kernel stores from registers, in place; the kernel reads and
        # writes C and D two elements at a time, so a c one element off goes
        # through an aligned copy.
        a = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(128, 96, device="cuda", dtype=torch.bfloat16)
        for off in (2, 1):
            store = torch.randn(64 * 96 + off, device="cuda", dtype=torch.bfloat16)
            store[:off] = float("nan")
            c = store[off:].view(64, 96)
            self.assertNotEqual(c.data_ptr() % 16, 0)
            ref = a.double() @ b.double() + c.double()
            tilejit.ops.mm_accumulate_(a, b, c)
            _close(self, c, ref, 2e-2, f"accumulated {off} elements off")
            self.assertTrue(store[:off].isnan().all().item(), f"written before c ({off})")

    def test_accumulate_into_columns_of_a_wider_tensor(self):
        # c a slice of columns (rows a leading dimension apart): the GEMM
        # takes the stride (spec ld=1) and leaves the other columns alone,
        # in f32 (a main_grad) and bf16; rows not 16 bytes apart go through
        # a contiguous copy.
        a = torch.randn(200, 72, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(72, 264, device="cuda", dtype=torch.bfloat16)
        for dtype, width in ((torch.float32, 300), (torch.bfloat16, 272),
                             (torch.bfloat16, 267)):
            wide = torch.full((200, width), float("nan"), device="cuda", dtype=dtype)
            c = wide[:, :264]
            c.copy_(torch.randn(200, 264, device="cuda", dtype=dtype))
            ref = 0.5 * (a.double() @ b.double()) + 2.0 * c.double()
            tilejit.ops.mm_accumulate_(a, b, c, 0.5, 2.0)
            _close(self, c, ref, 2e-2, f"{dtype} ld={width}")
            self.assertTrue(wide[:, 264:].isnan().all().item(), f"{dtype} ld={width}")

    def test_split_k_in_a_cuda_graph(self):
        # Few tiles over a long K: the default splits K, its workspace taken
        # from a stream-ordered pool (the graph's own allocation when
        # captured); the parts are added in a fixed order, so two calls give
        # the same bits.
        x = torch.randn(256, 4096, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(256, 4096, device="cuda", dtype=torch.bfloat16)
        y = tilejit.ops.linear(x, w)
        self.assertIn("splitk=", tilejit.explain("linear", x, w))
        _close(self, y, x.double() @ w.double().t(), 1e-2, "split")
        self.assertTrue(torch.equal(y, tilejit.ops.linear(x, w)))
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = tilejit.ops.linear(x, w)
        x.copy_(torch.randn_like(x))
        g.replay()
        g.replay()
        torch.cuda.synchronize()
        _close(self, out, x.double() @ w.double().t(), 1e-2, "replayed split")


def _ref_attention(q, k, v, causal, scale, layout):
    """float64 o (stored as q) and lse [b, hq, sq] of q, k, v stored in
    `layout` (0: [b, s, h, d], 1: [b, h, s, d]); query head h reads kv head
    h // (hq // hkv); causal keeps keys 0..i for row i."""
    if layout == 0:
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    qd, kd, vd = q.double(), k.double(), v.double()
    group = qd.shape[1] // kd.shape[1]
    kd, vd = kd.repeat_interleave(group, dim=1), vd.repeat_interleave(group, dim=1)
    s = (qd @ kd.transpose(-1, -2)) * scale
    if causal:
        keep = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, -1)
    o = torch.softmax(s, -1) @ vd
    return (o.transpose(1, 2) if layout == 0 else o), lse


def _ref_packed(q, k, v, cu_q, cu_k, causal, scale):
    """float64 o of packed sequences ([tokens, h, d]; sequence i's rows
    cu_q[i]:cu_q[i + 1] of q, cu_k[i]:cu_k[i + 1] of k and v), sequence by
    sequence, each as a batch of one; a sequence with queries and no keys
    gets o = 0 (a softmax over no keys)."""
    out = []
    for i in range(len(cu_q) - 1):
        qs = q[cu_q[i]:cu_q[i + 1]]
        ks, vs = k[cu_k[i]:cu_k[i + 1]], v[cu_k[i]:cu_k[i + 1]]
        if ks.shape[0] == 0:
            out.append(qs.double() * 0)
            continue
        o = _ref_attention(*(t.transpose(0, 1)[None] for t in (qs, ks, vs)), causal, scale, 1)[0]
        out.append(o[0].transpose(0, 1))
    return torch.cat(out)


def _count_attention_calls():
    """Wraps tilejit.ops.attention to note each call's layout: (the list of
    them, the original to put back)."""
    calls, orig = [], tilejit.ops.attention

    def counting(*args, **kw):
        calls.append(args[5])
        return orig(*args, **kw)
    tilejit.ops.attention = counting
    return calls, orig


def _qkv(layout, b, sq, sk, hq, hkv, d, dtype):
    def make(s, h):
        shape = (b, s, h, d) if layout == 0 else (b, h, s, d)
        return torch.randn(shape, device="cuda", dtype=dtype)
    return make(sq, hq), make(sk, hkv), make(sk, hkv)


@unittest.skipUnless(HOPPER, WHY_HOPPER)
class Attention(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(int.from_bytes(os.urandom(4), "little"))

    def test_forward_against_float64(self):
        bf, f16 = torch.bfloat16, torch.float16
        # layout, causal, b, sq, sk, hq, hkv, d, dtype, scale: both layouts, causal and
        # not, GQA and MQA, lengths that are no multiple of a tile, sq < sk and sq > sk.
        cases = [(1, False, 2, 128, 128, 4, 4, 128, bf, None),
                 (0, True, 2, 100, 100, 8, 2, 64, bf, None),
                 (1, True, 1, 77, 200, 4, 1, 256, f16, None),
                 (0, False, 3, 300, 45, 6, 3, 128, f16, 0.3),
                 (1, True, 2, 257, 130, 2, 2, 64, bf, None),
                 (0, True, 1, 1, 333, 16, 2, 128, bf, None),
                 (1, False, 2, 1000, 513, 2, 1, 64, f16, 0.05)]
        for layout, causal, b, sq, sk, hq, hkv, d, dt, scale in cases:
            with self.subTest(layout=layout, causal=causal, b=b, sq=sq, sk=sk, hq=hq, hkv=hkv,
                              d=d, dtype=dt, scale=scale):
                q, k, v = _qkv(layout, b, sq, sk, hq, hkv, d, dt)
                o, lse = torch.ops.tilejit.attn_fwd(q, k, v, causal, scale or 0.0, layout)
                ref_o, ref_lse = _ref_attention(q, k, v, causal, scale or d ** -0.5, layout)
                self.assertEqual((o.shape, o.dtype), (q.shape, dt))
                self.assertEqual((lse.shape, lse.dtype), ((b, hq, sq), torch.float32))
                _close(self, o, ref_o, 2e-2, "o")
                _close(self, lse, ref_lse, 1e-3, "lse")
                self.assertTrue(torch.equal(
                    tilejit.ops.attention(q, k, v, causal, scale, "bshd" if layout == 0 else
                                          "bhsd"), o))  # the eager path: the same kernel

    def test_inputs_at_any_offset_are_copied_not_refused(self):
        q, k, v = _qkv(1, 2, 64, 64, 2, 2, 64, torch.bfloat16)
        odd = torch.empty(q.numel() + 3, device="cuda", dtype=q.dtype)[3:].view(q.shape)
        odd.copy_(q)
        self.assertNotEqual(odd.data_ptr() % 16, 0)
        _close(self, tilejit.ops.attention(odd, k, v), _ref_attention(q, k, v, False, 0.125, 1)[0],
               2e-2, "o")
        _close(self, tilejit.ops.attention(q.transpose(2, 3).contiguous().transpose(2, 3), k, v),
               _ref_attention(q, k, v, False, 0.125, 1)[0], 2e-2, "o of a strided q")

    def test_backward_against_float64(self):
        bf, f16 = torch.bfloat16, torch.float16
        # layout, causal, b, sq, sk, hq, hkv, d, dtype, scale
        cases = [(1, True, 2, 200, 200, 4, 2, 128, bf, None),
                 (0, False, 1, 130, 77, 4, 1, 64, f16, 0.3),
                 (0, True, 2, 65, 300, 2, 2, 128, bf, None),
                 (1, True, 1, 150, 150, 2, 1, 256, bf, None)]
        for layout, causal, b, sq, sk, hq, hkv, d, dt, scale in cases:
            with self.subTest(layout=layout, causal=causal, b=b, sq=sq, sk=sk, hq=hq, hkv=hkv,
                              d=d, dtype=dt, scale=scale):
                q, k, v = (t.requires_grad_() for t in _qkv(layout, b, sq, sk, hq, hkv, d, dt))
                do = torch.randn_like(q)
                o = tilejit.ops.attention(q, k, v, causal, scale, "bshd" if layout == 0 else
                                          "bhsd")
                dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
                qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
                ref = _ref_attention(qd, kd, vd, causal, scale or d ** -0.5, layout)[0]
                rq, rk, rv = torch.autograd.grad(ref, (qd, kd, vd), do.double())
                for got, want, what in ((dq, rq, "dq"), (dk, rk, "dk"), (dv, rv, "dv")):
                    self.assertEqual((got.shape, got.dtype), (want.shape, dt))
                    _close(self, got, want, 3e-2, what)

    def test_packed_sequences_against_float64(self):
        bf, f16 = torch.bfloat16, torch.float16
        # query and key lengths, causal, hq, hkv, d, dtype: sequences of 1 row, ragged ones,
        # cross lengths, a sequence with queries and no keys, GQA and MQA.
        cases = [([1, 127, 300, 64, 1], None, True, 4, 2, 128, bf),
                 ([5, 200, 77], [300, 17, 129], False, 2, 2, 64, f16),
                 ([130, 3, 250], None, True, 8, 1, 256, bf),
                 ([10, 0, 50], [0, 0, 60], False, 2, 1, 128, bf)]
        for lens_q, lens_k, causal, hq, hkv, d, dt in cases:
            lens_k = lens_k or lens_q
            with self.subTest(lens_q=lens_q, lens_k=lens_k, causal=causal, hq=hq, hkv=hkv, d=d,
                              dtype=dt):
                def offsets(lens):
                    return torch.tensor([0] + lens, device="cuda").cumsum(0).to(torch.int32)
                cu_q, cu_k = offsets(lens_q), offsets(lens_k)
                q = torch.randn(sum(lens_q), hq, d, device="cuda", dtype=dt, requires_grad=True)
                k = torch.randn(sum(lens_k), hkv, d, device="cuda", dtype=dt, requires_grad=True)
                v = torch.randn(sum(lens_k), hkv, d, device="cuda", dtype=dt, requires_grad=True)
                do = torch.randn_like(q)
                o = tilejit.ops.attention_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k),
                                                 causal)
                dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
                qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
                ref = _ref_packed(qd, kd, vd, cu_q, cu_k, causal, d ** -0.5)
                keyless = [i for i in range(len(lens_q)) if lens_k[i] == 0]
                _close(self, o, ref, 2e-2, "o")
                rq, rk, rv = torch.autograd.grad(ref, (qd, kd, vd), do.double())
                for got, want, what in ((dq, rq, "dq"), (dk, rk, "dk"), (dv, rv, "dv")):
                    self.assertEqual((got.shape, got.dtype), (want.shape, dt))
                    _close(self, got, want, 3e-2, what)
                _, lse = torch.ops.tilejit.attn_varlen_fwd(q, k, v, cu_q, cu_k, max(lens_q),
                                                           max(lens_k), causal, 0.0)
                for i in keyless:
                    self.assertTrue(torch.all(lse[i, :, :lens_q[i]] == float("-inf")).item())
                # The same bits again (no atomics).
                again = torch.ops.tilejit.attn_varlen_bwd(do, q, k, v, o, lse, cu_q, cu_k,
                                                          max(lens_q), max(lens_k), causal, 0.0)
                first = torch.ops.tilejit.attn_varlen_bwd(do, q, k, v, o, lse, cu_q, cu_k,
                                                          max(lens_q), max(lens_k), causal, 0.0)
                for a, b in zip(first, again):
                    self.assertTrue(torch.equal(a, b))

    def test_sdpa_routes_jagged_tensors(self):
        """F.scaled_dot_product_attention on nested jagged tensors ([b, h, j, d], as torch's
        jagged path takes them) runs tilejit's packed-sequence kernels on their values and
        offsets: o a jagged tensor as q, o and the gradients of the values within bf16
        bounds of float64 sequence by sequence (GQA under a causal mask; cross lengths
        without one); calls tilejit does not take go to torch as made, and say why."""
        F = torch.nn.functional
        calls = []
        orig = tilejit.ops.attention_varlen

        def counting(*args, **kw):
            calls.append(args[5:8])
            return orig(*args, **kw)

        def jagged(values, offsets):
            return torch.nested.nested_tensor_from_jagged(values, offsets).transpose(1, 2)

        def offsets(lens):
            return torch.tensor([0] + lens, device="cuda").cumsum(0)

        tilejit.ops.attention_varlen = counting
        try:
            tilejit.enable(include=("sdpa",))
            for lens_q, lens_k, causal, hq, hkv, d in (([1, 300, 64, 700], None, True, 4, 2, 128),
                                                       ([5, 200, 77], [300, 17, 129], False, 2, 2,
                                                        64)):
                lens_k = lens_k or lens_q
                with self.subTest(lens_q=lens_q, lens_k=lens_k, causal=causal, hq=hq, hkv=hkv):
                    cu_q = offsets(lens_q)
                    cu_k = cu_q if lens_k is lens_q else offsets(lens_k)
                    bf = dict(device="cuda", dtype=torch.bfloat16, requires_grad=True)
                    qv = torch.randn(sum(lens_q), hq, d, **bf)
                    kv = torch.randn(sum(lens_k), hkv, d, **bf)
                    vv = torch.randn(sum(lens_k), hkv, d, **bf)
                    q, k, v = jagged(qv, cu_q), jagged(kv, cu_k), jagged(vv, cu_k)
                    n = len(calls)
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                       enable_gqa=hq != hkv)
                    self.assertEqual(calls[n:], [(max(lens_q), max(lens_k), causal)], "not routed")
                    self.assertTrue(o.is_nested and o.layout == torch.jagged)
                    self.assertEqual(o.shape, q.shape)  # q's sequences (its offsets)
                    out = o.transpose(1, 2).values()
                    do = torch.randn_like(out)
                    dq, dk, dv = torch.autograd.grad(out, (qv, kv, vv), do)
                    qd, kd, vd = (t.detach().double().requires_grad_() for t in (qv, kv, vv))
                    ref = _ref_packed(qd, kd, vd, cu_q, cu_k, causal, d ** -0.5)
                    _close(self, out, ref, 2e-2, "o of jagged tensors")
                    rq, rk, rv = torch.autograd.grad(ref, (qd, kd, vd), do.double())
                    for got, want, what in ((dq, rq, "dq"), (dk, rk, "dk"), (dv, rv, "dv")):
                        self.assertEqual(got.shape, want.shape)
                        _close(self, got, want, 3e-2, what + " of jagged tensors")

            # What goes to torch, as made, with the reason at debug level.
            fell_back = []
            saved = tilejit._originals["sdpa"]

            def fake_torch(*args, **kwargs):
                fell_back.append((args, kwargs))
                return args[0]

            tilejit._originals["sdpa"] = fake_torch
            try:
                lens = [3, 40, 17]
                cu = offsets(lens)
                x = torch.randn(sum(lens), 2, 64, device="cuda", dtype=torch.bfloat16)
                q = jagged(x, cu)
                holes = torch.nested.narrow(torch.randn(3, 40, 2, 64, device="cuda",
                                                        dtype=torch.bfloat16), 1,
                                            torch.zeros(3, dtype=torch.int64, device="cuda"),
                                            torch.tensor(lens, device="cuda"),
                                            layout=torch.jagged).transpose(1, 2)
                strided = torch.nested.nested_tensor([x[:3], x[3:43], x[43:]])
                dense = torch.randn(3, 2, 40, 64, device="cuda", dtype=torch.bfloat16)
                for why, args, kwargs in (
                        ("attn_mask", (q, q, q, torch.ones(1, device="cuda", dtype=torch.bool)),
                         {}),
                        ("holes", (holes, holes, holes), {}),
                        ("strided layout", (strided, strided, strided), {}),
                        ("mixed with dense", (q, dense, dense), {}),
                        ("head dim 80", (jagged(torch.randn(60, 2, 80, device="cuda",
                                                            dtype=torch.bfloat16), cu),) * 3, {}),
                        ("2 query heads and 1 kv heads", (q, jagged(x[:, :1].contiguous(), cu),
                                                          jagged(x[:, :1].contiguous(), cu)), {}),
                        ("other sequence lengths", (q, q, jagged(x[:50], offsets([3, 40, 7]))),
                         {}),
                        ("is_causal with queries and keys of other sequence lengths",
                         (q, jagged(x[:50], offsets([3, 40, 7])),
                          jagged(x[:50], offsets([3, 40, 7]))), {"is_causal": True}),
                        ("positive and finite as a float32", (q, q, q), {"scale": 1e-50})):
                    with self.subTest(refused=why):
                        n = len(calls), len(fell_back)
                        with self.assertLogs("tilejit", "DEBUG") as logs:
                            F.scaled_dot_product_attention(*args, **kwargs)
                        self.assertEqual((len(calls), len(fell_back)), (n[0], n[1] + 1))
                        self.assertIs(fell_back[-1][0][0], args[0])  # as made
                        self.assertIn(why, logs.output[-1])
            finally:
                tilejit._originals["sdpa"] = saved
        finally:
            tilejit.ops.attention_varlen = orig
            tilejit.disable()

    def test_packed_forward_in_a_cuda_graph(self):
        """A packed forward takes its tiles from a counter in tilejit's
        stream-ordered pool (zeroed and given back on the stream, which the
        capture records): replayed twice on new inputs, it matches float64
        sequence by sequence (a counter left counted would skip tiles, whose
        rows would keep the poison)."""
        lens, hq, d = [1, 300, 64, 700], 4, 128
        cu = torch.tensor([0] + lens, device="cuda").cumsum(0).to(torch.int32)
        q, k, v = (torch.randn(sum(lens), hq, d, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        tilejit.ops.attention_varlen(q, k, v, cu, cu, max(lens), max(lens), True)  # loaded
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = tilejit.ops.attention_varlen(q, k, v, cu, cu, max(lens), max(lens), True)
        for _ in range(2):
            out.fill_(float("nan"))
            for t in (q, k, v):
                t.copy_(torch.randn_like(t))
            g.replay()
            torch.cuda.synchronize()
            ref = _ref_packed(q, k, v, cu, cu, True, d ** -0.5)
            _close(self, out, ref, 2e-2, "replayed packed forward")

    def test_packed_sequences_fused_when_nondeterministic_is_allowed(self):
        """Packed sequences at head dim 128 with enough programs, where dQ may
        be added atomically: the fused backward (its default there), whose
        f32 sums of dQ (every row of Q and 64 more a sequence) come from
        tilejit's pool, within bf16 bounds of float64 sequence by sequence;
        ragged lengths, one sequence of a single row."""
        lens, hq, d = [300, 1000, 64, 1], 8, 128
        cu = torch.tensor([0] + lens, device="cuda").cumsum(0).to(torch.int32)
        q, k, v = (torch.randn(sum(lens), hq, d, device="cuda", dtype=torch.bfloat16,
                               requires_grad=True) for _ in range(3))
        do = torch.randn_like(q)
        qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
        ref = torch.cat([
            _ref_attention(*(t[cu[i]:cu[i + 1]].transpose(0, 1)[None] for t in (qd, kd, vd)),
                           True, d ** -0.5, 1)[0][0].transpose(0, 1) for i in range(len(lens))])
        want = torch.autograd.grad(ref, (qd, kd, vd), do.double())
        everything = 1 << 50
        tilejit.release_scratch()
        tilejit.set_allow_nondeterministic(True)
        try:
            o = tilejit.ops.attention_varlen(q, k, v, cu, cu, max(lens), max(lens), True)
            _close(self, o, ref, 2e-2, "o")
            for got, w, what in zip(torch.autograd.grad(o, (q, k, v), do), want,
                                    ("dq", "dk", "dv")):
                _close(self, got, w, 3e-2, what + " (fused, packed)")
            torch.cuda.synchronize()
            self.assertGreaterEqual(tilejit.release_scratch(everything),
                                    (sum(lens) + 64 * len(lens)) * hq * d * 4,
                                    "dQ's f32 sums were taken from the pool")
        finally:
            tilejit.set_allow_nondeterministic(False)
            tilejit.release_scratch()

    def test_packed_calls_without_rows_through_c(self):
        """The C interface's packed calls with no key rows in all (o = 0, lse =
        -inf, dq = 0) or no query rows (dk = dv = 0) run no kernel: they fill
        what they write on the stream and take no pointer for a tensor without
        rows (the package answers such calls itself)."""
        lib, eng = _lib.lib(), _lib.engine(0)
        stream = torch.cuda.current_stream().cuda_stream
        hq, hkv, d, bf = 4, 2, 64, torch.bfloat16
        cu_q = torch.tensor([0, 5, 9], dtype=torch.int32, device="cuda")
        cu_0 = torch.zeros(3, dtype=torch.int32, device="cuda")
        q = torch.randn(9, hq, d, device="cuda", dtype=bf)
        do = torch.randn_like(q)
        o = torch.full_like(q, float("nan"))
        lse = torch.zeros(2, hq, 5, device="cuda")
        dq = torch.full_like(q, float("nan"))
        # No keys (max_sk 0): o = 0, lse = -inf; dq = 0.
        st = lib.tj_attn_varlen_fwd(eng, 0, 2, 5, 0, 9, 0, hq, hkv, d, 1, 0.0, cu_q.data_ptr(),
                                    cu_0.data_ptr(), q.data_ptr(), None, None, o.data_ptr(),
                                    lse.data_ptr(), stream)
        self.assertEqual(st, 0, lib.tj_last_error().decode())
        st = lib.tj_attn_varlen_bwd(eng, 0, 2, 5, 0, 9, 0, hq, hkv, d, 1, 0.0, cu_q.data_ptr(),
                                    cu_0.data_ptr(), q.data_ptr(), None, None, o.data_ptr(),
                                    lse.data_ptr(), do.data_ptr(), dq.data_ptr(), None, None,
                                    None, 0, stream)
        self.assertEqual(st, 0, lib.tj_last_error().decode())
        torch.cuda.synchronize()
        self.assertTrue(torch.all(o == 0).item())
        self.assertTrue(torch.all(lse == float("-inf")).item())
        self.assertTrue(torch.all(dq == 0).item())
        # No queries (max_sq 0): dk = dv = 0; the forward writes nothing.
        k = torch.randn(7, hkv, d, device="cuda", dtype=bf)
        v = torch.randn_like(k)
        dk, dv = torch.full_like(k, float("nan")), torch.full_like(k, float("nan"))
        cu_k = torch.tensor([0, 3, 7], dtype=torch.int32, device="cuda")
        st = lib.tj_attn_varlen_fwd(eng, 0, 2, 0, 4, 0, 7, hq, hkv, d, 0, 0.0, cu_0.data_ptr(),
                                    cu_k.data_ptr(), None, k.data_ptr(), v.data_ptr(), None, None,
                                    stream)
        self.assertEqual(st, 0, lib.tj_last_error().decode())
        st = lib.tj_attn_varlen_bwd(eng, 0, 2, 0, 4, 0, 7, hq, hkv, d, 0, 0.0, cu_0.data_ptr(),
                                    cu_k.data_ptr(), None, k.data_ptr(), v.data_ptr(), None, None,
                                    None, None, dk.data_ptr(), dv.data_ptr(), None, 0, stream)
        self.assertEqual(st, 0, lib.tj_last_error().decode())
        torch.cuda.synchronize()
        self.assertTrue(torch.all(dk == 0).item() and torch.all(dv == 0).item())
        # A tensor with rows is still named when it is missing.
        st = lib.tj_attn_varlen_bwd(eng, 0, 2, 0, 4, 0, 7, hq, hkv, d, 0, 0.0, cu_0.data_ptr(),
                                    cu_k.data_ptr(), None, k.data_ptr(), v.data_ptr(), None, None,
                                    None, None, None, dv.data_ptr(), None, 0, stream)
        self.assertEqual(st, 1)
        self.assertIn("dk is null", lib.tj_last_error().decode())

    def test_backward_is_bitwise_repeatable(self):
        q, k, v = _qkv(1, 2, 300, 300, 4, 2, 128, torch.bfloat16)
        do = torch.randn_like(q)
        o, lse = torch.ops.tilejit.attn_fwd(q, k, v, True, 0.0, 1)
        first = torch.ops.tilejit.attn_bwd(do, q, k, v, o, lse, True, 0.0, 1)
        second = torch.ops.tilejit.attn_bwd(do, q, k, v, o, lse, True, 0.0, 1)
        for a, b in zip(first, second):
            self.assertTrue(torch.equal(a, b))

    def test_explain_the_backward(self):
        """The backward's spec comes from the engine, as the call's own: by
        default deterministic=1; with set_allow_nondeterministic(True)
        deterministic=0 at head dims 64 and 128 (its own kernels and
        winners), but 1 at 256 (no such config there) and under torch's
        deterministic flag."""
        views = [t.transpose(1, 2) for t in _qkv(0, 2, 96, 96, 4, 2, 64, torch.bfloat16)]
        wide = [t.transpose(1, 2) for t in _qkv(0, 1, 80, 80, 2, 2, 256, torch.bfloat16)]
        text = tilejit.explain("sdpa_bwd", *views, causal=True)
        self.assertIn("attn_bwd dt=bf16 d=64 hq=4 hkv=2 causal=1 layout=0 b=2 sq=96 sk=96 "
                      "deterministic=1", text)
        self.assertIn("attn_fwd dt=bf16 d=64 hq=4 hkv=2 causal=1 layout=0 b=2 sq=96 sk=96",
                      tilejit.explain("sdpa", *views, causal=True))
        tilejit.set_allow_nondeterministic(True)
        try:
            self.assertIn("deterministic=0", tilejit.explain("sdpa_bwd", *views, causal=True))
            self.assertIn("deterministic=1", tilejit.explain("attention_bwd", *wide))
            torch.use_deterministic_algorithms(True)
            try:
                self.assertIn("deterministic=1",
                              tilejit.explain("sdpa_bwd", *views, causal=True))
            finally:
                torch.use_deterministic_algorithms(False)
        finally:
            tilejit.set_allow_nondeterministic(False)
        # Sizes the call would refuse are named, as the call names them.
        bad = [t[:, :, :, :96] for t in wide]
        with self.assertRaisesRegex(tilejit.TilejitError,
                                    "head dim d must be 64, 128 or 256, got d=96"):
            tilejit.explain("sdpa_bwd", *bad, causal=True)
        with self.assertRaisesRegex(tilejit.TilejitError, "d must be >= 64, got 48"):
            tilejit.explain("sdpa_bwd", *[t[:, :, :, :48] for t in views], causal=True)

    def test_nondeterministic_backward_when_allowed(self):
        """With set_allow_nondeterministic(True) (the engine builds head dim
        64's and 128's backward specs with deterministic=0, their own kernels and
        winners; untuned at head dim 64, the default config, the same as
        deterministic's)
        the gradients stay within bf16 bounds of float64; under torch's
        deterministic flag the calls are bitwise repeatable. The fused
        kernel itself, through the pool, is GpuAttention's
        BackwardFusedAddsDqOverKeyTiles and
        OnlyNondeterministicCallsGetAFusedWinner."""
        q, k, v = (t.requires_grad_() for t in _qkv(0, 2, 200, 200, 4, 2, 64, torch.bfloat16))
        do = torch.randn_like(q)
        qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
        ref = _ref_attention(qd, kd, vd, True, 0.125, 0)[0]
        want = torch.autograd.grad(ref, (qd, kd, vd), do.double())
        tilejit.set_allow_nondeterministic(True)
        try:
            o = tilejit.ops.attention(q, k, v, True, None, "bshd")
            for got, w, what in zip(torch.autograd.grad(o, (q, k, v), do), want,
                                    ("dq", "dk", "dv")):
                _close(self, got, w, 3e-2, what + " (nondeterministic allowed)")
            torch.use_deterministic_algorithms(True)
            try:
                o = tilejit.ops.attention(q, k, v, True, None, "bshd")
                first = torch.autograd.grad(o, (q, k, v), do)
                o = tilejit.ops.attention(q, k, v, True, None, "bshd")
                for a, b in zip(first, torch.autograd.grad(o, (q, k, v), do)):
                    self.assertTrue(torch.equal(a, b))
            finally:
                torch.use_deterministic_algorithms(False)
        finally:
            tilejit.set_allow_nondeterministic(False)

    def test_release_scratch_gives_the_pool_back(self):
        """A fused backward (head dim 128 with two consumers' worth of
        programs, dQ may be added atomically: the default then) takes dQ's
        f32 sums from tilejit's pool, which keeps them after the call;
        release_scratch() gives them back, keep_bytes above what it holds
        keeps it all, and the next call reserves again and is still right."""
        q, k, v = (t.requires_grad_() for t in _qkv(0, 1, 512, 512, 32, 32, 128, torch.bfloat16))
        do = torch.randn_like(q)
        qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
        want = torch.autograd.grad(_ref_attention(qd, kd, vd, True, 128 ** -0.5, 0)[0],
                                   (qd, kd, vd), do.double())
        everything = 1 << 50
        with self.assertRaisesRegex(ValueError, "keep_bytes must be >= 0, got -1"):
            tilejit.release_scratch(-1)
        tilejit.set_allow_nondeterministic(True)
        try:
            for round_ in range(2):
                o = tilejit.ops.attention(q, k, v, True, None, "bshd")
                for got, w, what in zip(torch.autograd.grad(o, (q, k, v), do), want,
                                        ("dq", "dk", "dv")):
                    _close(self, got, w, 3e-2, f"{what} (round {round_})")
                torch.cuda.synchronize()
                held = tilejit.release_scratch(everything)
                self.assertGreaterEqual(held, 32 * 512 * 128 * 4, "dQ's f32 sums were taken")
                self.assertEqual(tilejit.release_scratch(everything), held)
                self.assertEqual(tilejit.release_scratch(), 0)
        finally:
            tilejit.set_allow_nondeterministic(False)

    def test_sdpa_routes_where_supported_and_matches_torch(self):
        F = torch.nn.functional
        calls, orig = _count_attention_calls()
        try:
            tilejit.enable()
            for layout, causal, gqa in ((1, False, False), (0, True, True), (1, True, True)):
                with self.subTest(layout=layout, causal=causal, gqa=gqa):
                    q, k, v = _qkv(layout, 2, 150, 150, 8, 2 if gqa else 8, 128, torch.bfloat16)
                    if layout == 0:  # as torch gets BSHD storage: [b, h, s, d] views
                        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
                    n = len(calls)
                    with torch.no_grad():
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                           enable_gqa=gqa)
                    self.assertEqual(calls[n:], [layout])
                    self.assertEqual(o.shape, q.shape)
                    _close(self, o, _ref_attention(q, k, v, causal, 128 ** -0.5, 1)[0], 2e-2,
                           "sdpa routed")
            # A gradient is wanted: tilejit's forward and backward.
            q, k, v = (t.requires_grad_() for t in _qkv(1, 1, 64, 64, 2, 2, 64, torch.bfloat16))
            n = len(calls)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            o.sum().backward()
            self.assertEqual(len(calls), n + 1)
            qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
            _ref_attention(qd, kd, vd, True, 0.125, 1)[0].sum().backward()
            _close(self, q.grad, qd.grad, 3e-2, "dq through sdpa")
            _close(self, v.grad, vd.grad, 3e-2, "dv through sdpa")
            # Head dim 256 with a gradient: tilejit's too.
            q, k, v = (t.requires_grad_() for t in _qkv(1, 1, 64, 64, 2, 2, 256, torch.bfloat16))
            n = len(calls)
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
            self.assertEqual(len(calls), n + 1)
            qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
            _ref_attention(qd, kd, vd, True, 256 ** -0.5, 1)[0].sum().backward()
            _close(self, k.grad, kd.grad, 3e-2, "dk through sdpa at head dim 256")
            n = len(calls)
            with torch.no_grad():  # a mask: torch's
                F.scaled_dot_product_attention(q, k, v, torch.ones(64, 64, device="cuda",
                                                                   dtype=torch.bool))
            self.assertEqual(len(calls), n)
        finally:
            tilejit.ops.attention = orig
            tilejit.disable()

    def test_sdpa_causal_with_other_lengths_matches_torch(self):
        # More and fewer queries than keys under is_causal: the mask's
        # diagonal from the top left, as torch's dense SDPA aligns it.
        F = torch.nn.functional
        calls, orig = _count_attention_calls()
        tilejit.enable(include=("sdpa",))
        try:
            for layout in (0, 1):
                for sq, sk in ((150, 90), (70, 200)):
                    with self.subTest(layout=layout, sq=sq, sk=sk):
                        q, k, v = _qkv(layout, 2, sq, sk, 4, 4, 64, torch.bfloat16)
                        if layout == 0:
                            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
                        n = len(calls)
                        with torch.no_grad():
                            got = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                            with tilejit.use(False):
                                want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        self.assertEqual(calls[n:], [layout], "not taken by tilejit")
                        _close(self, got, want.double(), 2e-2, "is_causal, sq != sk")
        finally:
            tilejit.ops.attention = orig
            tilejit.disable()

    def test_compile_through_sdpa_where_it_falls_back(self):
        # With SDPA routed, a call left to torch (a mask) and one taken
        # compile into one graph: the fallback says nothing while traced.
        F = torch.nn.functional
        q, k, v = _qkv(1, 1, 64, 64, 2, 2, 64, torch.bfloat16)
        mask = torch.rand(64, 64, device="cuda") > 0.3
        mask.fill_diagonal_(True)

        def f(q, k, v, mask):
            return (F.scaled_dot_product_attention(q, k, v, mask) +
                    F.scaled_dot_product_attention(q, k, v, is_causal=True))
        with torch.no_grad():
            want = f(q, k, v, mask)
        from torch._dynamo.backends.registry import lookup_backend
        graphs = []

        def recording(gm, example_inputs):  # the traced graph, run as aot_eager runs it
            graphs.append(str(gm.graph))
            return lookup_backend("aot_eager")(gm, example_inputs)
        tilejit.enable(include=("sdpa",))
        try:
            torch._dynamo.reset()
            with torch.no_grad():
                got = torch.compile(f, backend=recording, fullgraph=True)(q, k, v, mask)
        finally:
            tilejit.disable()
        _close(self, got, want.double(), 2e-2, "compiled through sdpa")
        # One graph: torch's attention for the mask, tilejit's for the other.
        self.assertEqual(len(graphs), 1)
        self.assertIn("tilejit.attn_fwd", graphs[0])
        self.assertIn("scaled_dot_product_attention", graphs[0])

    def test_jit_trace_records_the_op(self):
        # torch.jit.trace records tilejit::attn_fwd (not the output's
        # allocation alone), so the trace replays the kernel on new inputs.
        def f(q, k, v):
            return tilejit.ops.attention(q, k, v, causal=True)
        q, k, v = _qkv(1, 1, 96, 96, 2, 2, 64, torch.bfloat16)
        with torch.no_grad():
            traced = torch.jit.trace(f, (q, k, v), check_trace=False)
            self.assertIn("tilejit::attn_fwd", str(traced.graph))
            q2, k2, v2 = _qkv(1, 1, 96, 96, 2, 2, 64, torch.bfloat16)
            self.assertTrue(torch.equal(traced(q2, k2, v2), f(q2, k2, v2)))

    def test_opcheck(self):
        q, k, v = _qkv(1, 2, 96, 80, 4, 2, 64, torch.bfloat16)
        torch.library.opcheck(torch.ops.tilejit.attn_fwd.default, (q, k, v, True, 0.0, 1))
        q, k, v = _qkv(0, 2, 96, 80, 4, 2, 64, torch.float16)
        torch.library.opcheck(torch.ops.tilejit.attn_fwd.default, (q, k, v, False, 0.2, 0))
        q, k, v = (t.requires_grad_() for t in _qkv(1, 2, 96, 80, 4, 2, 128, torch.bfloat16))
        torch.library.opcheck(torch.ops.tilejit.attn_fwd.default, (q, k, v, True, 0.0, 1))
        o, lse = torch.ops.tilejit.attn_fwd(q, k, v, True, 0.0, 1)
        torch.library.opcheck(torch.ops.tilejit.attn_bwd.default,
                              (torch.randn_like(o), q.detach(), k.detach(), v.detach(), o.detach(),
                               lse.detach(), True, 0.0, 1))

    def test_compile_traces_the_fake_kernel(self):
        def f(q, k, v):
            return tilejit.ops.attention(q, k, v, causal=True) * 2
        q, k, v = _qkv(1, 2, 64, 64, 2, 2, 64, torch.bfloat16)
        eager = f(q, k, v)
        compiled = torch.compile(f, backend="aot_eager", fullgraph=True)(q, k, v)
        self.assertTrue(torch.equal(eager, compiled))

    def test_warmup_then_capture_and_explain(self):
        shape = (2, 96, 96, 4, 2, 64, True, "bshd")
        q, k, v = _qkv(0, 2, 96, 96, 4, 2, 64, torch.bfloat16)
        views = [t.transpose(1, 2) for t in (q, k, v)]  # as F.scaled_dot_product_attention sees
        before = tilejit.explain("sdpa", *views, causal=True)
        self.assertIn("attn_fwd dt=bf16 d=64 hq=4 hkv=2 causal=1 layout=0 b=2 sq=96 sk=96",
                      before)
        tilejit.warmup(attention=[shape])
        self.assertIn("loaded", tilejit.explain("attention", *views, causal=True))
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):  # nothing compiled during capture: warmed up
            out = tilejit.ops.attention(q, k, v, causal=True, layout="bshd")
        g.replay()
        torch.cuda.synchronize()
        _close(self, out, _ref_attention(q, k, v, True, 0.125, 0)[0], 2e-2, "captured")


if __name__ == "__main__":
    unittest.main(verbosity=2)
